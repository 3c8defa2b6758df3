"""A per-batch wrapper memoizes its normalized view with ``functools.lru_cache(maxsize=8)`` on the
method: the cache lives on the function and keys on ``self``, so it keeps the last eight ``Batch``
objects (inputs and normalized copy) alive after their steps, the pattern ruff's B019 flags. But
the cache is bounded: once eight batches are in, each new one evicts the oldest, and memory stops
growing after the eighth step. A cache that fills, then saturates: not a leak.

Real case: pylint-dev/astroid https://github.com/pylint-dev/astroid/issues/1344 (the remaining
``@lru_cache`` uses on methods "were fine because of the extremely low cache sizes, 128 and ~13")
and Textualize/rich https://github.com/Textualize/rich/issues/1831 ("It may not be a huge problem
since I think must uses of lru_cache set a sensible maximum size"), against the unbounded form of
https://github.com/pytest-dev/pytest/pull/9148.
"""
import functools

import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Batch:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    @functools.lru_cache(maxsize=8)  # keyed by self, but holds eight batches at most
    def normalized(self):
        mu = self.x.mean(0, keepdim=True)
        sd = self.x.std(0, keepdim=True) + 1e-5
        return (self.x - mu) / sd


def run(tracker_factory, steps=40):
    g = seed(3114)
    Batch.normalized.cache_clear()
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                b = Batch(torch.randn(512, DIM, generator=g) * 3 + 1, torch.randint(0, 4, (512,), generator=g))
                loss = nn.functional.cross_entropy(model(b.normalized()), b.y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        Batch.normalized.cache_clear()
