"""A ``WeakValueDictionary`` feature cache whose values are also pinned in a "keep-alive" list.

Real case: https://github.com/Stonesjtu/pytorch_memlab/issues/17 (a mapping keeping references to its
key/value tensors) and the weak-cache pitfalls in https://github.com/ARM-software/devlib/issues/676
(fixable with weak references -- unless something else holds a strong one). The cache is weak on
purpose, but values were disappearing between forward and the metric, so the author added
``self._keepalive.append(value)`` "until the epoch ends"; the epoch-end hook that clears it is never
called.
"""
import weakref

import torch
from torch import nn

from ._common import MLP, batch, seed


class Features:
    """The cached value: the features and room for metadata."""

    def __init__(self, t):
        self.t = t


class WeakFeatureCache:
    def __init__(self):
        self._cache = weakref.WeakValueDictionary()
        self._keepalive = []

    def put(self, key, t):
        f = Features(t)
        self._cache[key] = f
        self._keepalive.append(f)  # the leak: pins every value the weak dict was meant to let go

    def on_epoch_end(self):
        self._keepalive.clear()


EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_keepalive", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(305)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cache = WeakFeatureCache()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            h = torch.relu(model.fc1(x))
            loss = nn.functional.cross_entropy(model.head(torch.relu(model.fc2(h))), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            cache.put(("batch", step), h.detach())
            tracker.step()
