"""An exporter's reference tracker registers a ``weakref.finalize`` on each tensor it tracks, with
its own bound method as the callback, while it also maps the tensor in a dict of its own: the
finalizer registry keeps the callback, the callback keeps the tracker, and the tracker keeps the
tensor, so the tensor never dies and the finalizer never runs.

Real case: https://github.com/llvm/torch-mlir/pull/3912 ("``RefTracker`` class ... has these
lines in it's ``track`` method: ``weakref.finalize(referrent, self._ref_finalizer, ref_id)``
... if these lines are present, both the ``weakref.finalize`` objects and their corresponding
tensors are not released") and https://github.com/iree-org/iree-turbine/issues/281 ("the
``weakref.finalize`` objects that are registered in ``RefTracker`` are still alive after the loop").
Here a training loop exports a snapshot of the step's activations each step through a new
tracker, which the loop then drops; nothing of the user's own names the trackers any more.
"""
import weakref

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_refs", "top": 1}


class RefMapping:
    __slots__ = ("value", "ref_id")

    def __init__(self, value, ref_id):
        self.value, self.ref_id = value, ref_id


class RefTracker:
    """Maps tracked objects to ids; forgets an id when its object dies (as torch-mlir's did)."""

    def __init__(self):
        self._refs = {}

    def track(self, referrent):
        ref_id = id(referrent)
        self._refs[ref_id] = RefMapping(referrent, ref_id)
        weakref.finalize(referrent, self._ref_finalizer, ref_id)  # the leak: keeps self, which keeps referrent
        return ref_id

    def _ref_finalizer(self, ref_id):
        self._refs.pop(ref_id, None)


def export_snapshot(features):
    """Hands the step's features to a fresh exporter (a stand-in for an AOT export of a debug graph)."""
    tracker = RefTracker()
    return tracker.track(features)


def run(tracker_factory, steps=30):
    g = seed(67)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            export_snapshot(torch.relu(model.fc1(x)).detach())
            tracker.step()
    # not part of the case: run the finalizers the loop left, so later scenarios start clean
    for fin in [f for f in weakref.finalize._registry if f.peek() and isinstance(getattr(f.peek()[1], "__self__", None), RefTracker)]:
        fin()
