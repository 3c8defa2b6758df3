"""At each log interval the loss is kept, detached and on its device (no ``.item()``, which would
sync with the device every interval), in a ``deque(maxlen=...)`` of the last logged values, whose
mean is the smoothed loss printed. It grows by one small tensor per interval, a staircase like a
leak's, but the window is bounded and no graph is kept.

Real-world motivation: torchtitan https://github.com/pytorch/torchtitan/issues/763 (losses kept
on device between log steps rather than ``.item()``'d, to avoid a sync each step; the maintainers
keep them because their number is bounded by the log interval).
"""
from collections import deque

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

LOG_EVERY = 5


def run(tracker_factory, steps=40):
    g = seed(65)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    window = deque(maxlen=20)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % LOG_EVERY == 0:
                window.append(loss.detach())
                smoothed = torch.stack(list(window)).mean()  # printed (the item only when shown)
                del smoothed
            tracker.step()
