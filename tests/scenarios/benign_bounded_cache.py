"""Recent outputs kept in ``collections.deque(maxlen=8)``: bounded, so not a leak.

Real case: the fix suggested in https://github.com/jacobgil/pytorch-grad-cam/issues/71 (keep only
what is needed, detached) and the bounded primitive cache in https://github.com/pytorch/pytorch/issues/98688.
"""
from collections import deque

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=40):
    g = seed(22)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    recent = deque(maxlen=8)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            recent.append(logits.detach())
            tracker.step()
