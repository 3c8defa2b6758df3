"""Automatic garbage collection switched off for the run and a collection forced every few steps
instead. Each step leaves behind a small reference cycle (a step record that refers back to
itself through its callback) holding that step's detached outputs; with ``gc`` disabled nothing
frees it until the next scheduled ``gc.collect(1)``, so memory saw-tooths: it climbs for
``gc_interval`` steps, drops back at each collection, and never grows from one period to the next.

Real case: OLMo-core's ``GarbageCollectorCallback``,
https://github.com/allenai/OLMo-core/blob/main/src/olmo_core/train/callbacks/garbage_collector.py
("Disables automatic garbage collection during training and runs gen1 collection on a set
schedule instead": ``gc.disable()`` in ``pre_train``, ``if self.step % self.gc_interval == 0:
gc.collect(1)`` in ``post_step``, ``gc.enable()`` again in ``post_train``). Here the interval is
5 steps, and the earlier automatic state is restored at the end.
"""
import gc

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
GC_INTERVAL = 5


class StepRecord:
    """Per-step outputs handed to callbacks; its bound callback makes a cycle back to itself."""

    def __init__(self, logits, features):
        self.logits = logits
        self.features = features
        self.on_done = self.finish  # bound method -> self: only the cyclic collector frees it

    def finish(self):
        return float(self.logits.argmax(-1).float().mean())


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    was_enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(1, steps + 1):
                x, y = batch(g, n=64)
                h = torch.relu(model.fc1(x))
                logits = model.head(torch.relu(model.fc2(h)))
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                record = StepRecord(logits.detach(), h.detach().clone())
                record.on_done()
                del record
                if step % GC_INTERVAL == 0:
                    gc.collect(1)
                tracker.step()
    finally:
        if was_enabled:
            gc.enable()
