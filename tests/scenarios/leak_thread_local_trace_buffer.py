"""A tracing helper keeps its per-thread buffer in a ``threading.local()``; the buffer is never drained.

Real case: https://github.com/pytorch/pytorch/issues/64412 and https://github.com/pytorch/pytorch/issues/61920
(memory that grows with thread-local state) and https://github.com/Stonesjtu/pytorch_memlab/issues/17
(a debugging tool keeping references to the tensors it reports). ``trace(name, t)`` appends a detached
copy of an activation to ``_local.buffer`` so that a per-thread exporter can ship it; the exporter is
only started in distributed runs, so in this single-process run the buffer only grows.
"""
import threading

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "buffer", "top": 1}

_local = threading.local()


def trace(name, t):
    buf = getattr(_local, "buffer", None)
    if buf is None:
        buf = _local.buffer = []
    buf.append((name, t.detach().clone()))  # the leak: drained only by an exporter that never runs


class TracedMLP(nn.Module):
    def __init__(self, d=DIM, hidden=128):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        trace("fc1", h)
        return self.fc2(h)


def run(tracker_factory, steps=30):
    g = seed(302)
    _local.__dict__.pop("buffer", None)
    model = TracedMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
