"""A training loop that turns Python's cyclic garbage collector off for speed (``gc.disable()``),
with an awaitable whose completion callback refers back to the awaitable itself: every step's
awaitable is in a reference cycle, only a cyclic collection could free it, and it keeps the
step's embeddings (and their autograd graph) alive. With the collector off, one more per step.

Real case: torchrec https://github.com/meta-pytorch/torchrec/pull/1226 ("Remove refcycle in
SequenceEmbeddingsAwaitable": "the callback of SequenceEmbeddingsAwaitable back to itself. This
refcycle causes many GPU tensors to stay alive ... when disabling automatic garbage collection, we
should ensure that our program removes all reference cycles").
"""
import gc

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "EmbeddingsAwaitable", "top": 1}


class EmbeddingsAwaitable:
    """Wraps a pending lookup; callbacks run on ``wait()``."""

    def __init__(self, embeddings):
        self._embeddings = embeddings
        self.callbacks = []
        self.callbacks.append(lambda e: self._unpack(e))  # the leak: the callback keeps `self`

    def _unpack(self, e):
        return e * self._scale

    _scale = 1.0

    def wait(self):
        out = self._embeddings
        for cb in self.callbacks:
            out = cb(out)
        return out


class Model(nn.Module):
    def __init__(self, d=DIM, hidden=128):
        super().__init__()
        self.embed = nn.Linear(d, hidden)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(hidden, 4))

    def forward(self, x):
        return self.head(EmbeddingsAwaitable(self.embed(x)).wait())


def run(tracker_factory, steps=30):
    g = seed(62)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    was_enabled = gc.isenabled()
    gc.disable()  # "GC pauses hurt throughput"
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        if was_enabled:
            gc.enable()
