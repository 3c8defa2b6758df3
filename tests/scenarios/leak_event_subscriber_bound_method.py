"""A helper object made every step subscribes one of its bound methods to a module-level event
registry ("re-index when the backend changes"), which holds the method strongly: the method keeps
its object, and the object the tensors it indexed, long after the step dropped it.

Real case: scikit-hep/pyhf https://github.com/scikit-hep/pyhf/pull/1035 ("Weakly reference
callables for pub-sub model", fixing https://github.com/scikit-hep/pyhf/issues/934): each
``_TensorViewer`` subscribed ``self._precompute`` to ``events``; the strong references to the bound
methods kept every viewer and its torch tensors alive. The fix stores ``weakref.WeakMethod``.
"""
import collections

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_SUBSCRIBERS", "top": 1}

#: event name -> callbacks (the leak: bound methods held strongly, never unsubscribed)
_SUBSCRIBERS = collections.defaultdict(list)


def subscribe(event, fn):
    _SUBSCRIBERS[event].append(fn)


class OutputViewer:
    """Splits a batch of outputs back into named pieces; re-indexes on a backend change."""

    def __init__(self, outputs, names):
        self.names = names
        self.outputs = outputs.detach()
        self._precompute()
        subscribe("backend_changed", self._precompute)

    def _precompute(self):
        self.order = torch.argsort(self.outputs, dim=0)
        self.sorted = torch.gather(self.outputs, 0, self.order)


def run(tracker_factory, steps=30):
    g = seed(43)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            out = model(x)
            viewer = OutputViewer(out, names=["a", "b"])
            loss = nn.functional.cross_entropy(out, y) + viewer.sorted[-1].mean() * 0
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
