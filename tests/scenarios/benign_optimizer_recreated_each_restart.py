"""Warm restarts done by hand: every 5 steps the script builds a fresh Adam optimizer and a fresh
``CosineAnnealingLR`` for the next cycle and rebinds ``opt``/``sched``. Each new optimizer
allocates a full set of Adam moments on its first step, which looks like growth at every restart,
but the previous optimizer and scheduler are dropped with the rebinding: the scheduler no longer
patches ``optimizer.step`` with a closure over the optimizer (the reference cycle that kept old
optimizers alive until a full garbage collection), so the old moments are freed at once.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/25605 ("Reference cycle in
_LRScheduler": the ``step`` wrapper captured the optimizer, so a dropped optimizer was not freed)
and https://github.com/pytorch/pytorch/issues/85410 ("_LRScheduler memory leak"), both fixed; the
pattern of re-creating the optimizer and scheduler in a loop is from
https://github.com/pytorch/pytorch/issues/17630.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
CYCLE = 5


def run(tracker_factory, steps=30):
    g = seed(5105)
    model = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=CYCLE)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step and step % CYCLE == 0:  # restart: new optimizer and schedule
                opt = torch.optim.Adam(model.parameters(), lr=1e-3 * 0.8 ** (step // CYCLE))
                sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=CYCLE)
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tracker.step()
