"""A per-batch wrapper memoizes its derived views with ``functools.cache`` on methods. The cache
lives on the function, not on the instance, and its key is ``(self,)``: every ``Batch`` ever built
stays in ``Batch.normalized``'s cache, with its inputs and the normalized copy, and a new ``Batch``
each step never even hits the cache. Memory grows by one batch (inputs plus normalized features)
a step.

Real case: pytest-dev/pytest https://github.com/pytest-dev/pytest/pull/9148 ("The problem with
``@lru_cache`` on methods is that it also captures ``self`` and leaks it until the entry is evicted
(if ever)"), getsentry/seer https://github.com/getsentry/seer/pull/2512 ("Fix memory leak due to
functools caches": "This includes the instance of ``self``"; new instances meant no cache hits
either) and PyCQA/flake8 https://github.com/PyCQA/flake8/pull/1573.
"""
import functools

import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "Batch.normalized", "top": 1}


class Batch:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    @functools.cache  # the leak: keyed by self, kept forever
    def normalized(self):
        mu = self.x.mean(0, keepdim=True)
        sd = self.x.std(0, keepdim=True) + 1e-5
        return (self.x - mu) / sd


def run(tracker_factory, steps=30):
    g = seed(3102)
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
