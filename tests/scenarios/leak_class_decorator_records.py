"""A class-based decorator on the model's ``forward`` that records every call's output for debugging.

Real case: https://github.com/Stonesjtu/pytorch_memlab/issues/17 ("Memory leak when calling mem
reporter": a debugging tool's own mapping keeps references to the tensors it reports) and
https://github.com/pytorchbearer/torchbearer/pull/533. ``RecordCalls`` is an object with
``__call__`` and ``__get__`` used as ``@RecordCalls`` on a method; it appends each result (graph
and all) to ``self.calls`` on the decorator instance, which lives on the class.
"""
import functools

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "calls", "top": 1}


class RecordCalls:
    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.calls = []

    def __get__(self, obj, objtype=None):
        return functools.partial(self, obj)

    def __call__(self, obj, *args, **kwargs):
        out = self.fn(obj, *args, **kwargs)
        self.calls.append(out)  # the leak: every output kept on the decorator
        return out


class Net(nn.Module):
    def __init__(self, d=DIM, hidden=128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 4)

    @RecordCalls
    def features(self, x):
        return self.body(x)

    def forward(self, x):
        return self.head(self.features(x))


def run(tracker_factory, steps=30):
    g = seed(110)
    Net.__dict__["features"].calls.clear()  # a fresh run in the same process starts empty
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
