"""``itertools.cycle`` over a few batches built once before the loop (overfitting a handful of
batches to check that the model can learn): ``cycle`` saves its items, but they are the same
tensors each pass, so nothing new stays alive. The look-alike of ``leak_itertools_cycle_loader``,
where the cycled DataLoader makes new tensors on every step.

Real case: the pattern ``itertools.cycle(dataset)`` reported in
https://github.com/pytorch/pytorch/issues/23900 is harmless when the items already exist; the leak
there comes from a Dataset whose ``__getitem__`` returns a new array each time.
"""
import itertools

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "ok", "kind": None, "location": None, "top": 1}


def run(tracker_factory, steps=30):
    g = seed(85)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fixed = [batch(g, n=128) for _ in range(4)]
    train_batches = itertools.cycle(fixed)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = next(train_batches)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
