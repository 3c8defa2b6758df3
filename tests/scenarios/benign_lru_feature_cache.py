"""Features of recently seen samples kept in an ``OrderedDict`` with LRU eviction: it fills to its
capacity, then each new entry evicts the least recently used one.

Real case: the LRU fix https://github.com/deepseek-ai/DeepSeek-V3/pull/1128 ("Replace ``dict``
with ``collections.OrderedDict`` ... ``move_to_end()`` on cache hits ... ``popitem(last=False)``
for proper LRU eviction") and https://github.com/huggingface/dataset-viewer/pull/1507 (an LRU
cache of rows made smaller: "It was causing the workers memory to keep increasing"; then "It's
now perfectly stable"). Samples are drawn at random from a pool larger than the cache, so it hits
and misses; the teacher's features of a sample are cached for reuse (distillation).
"""
from collections import OrderedDict

import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = OrderedDict()

    def get(self, key, make):
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        value = self.items[key] = make()
        while len(self.items) > self.capacity:
            self.items.popitem(last=False)
        return value


def run(tracker_factory, steps=30):
    g = seed(35)
    teacher, student = MLP(hidden=128, d_out=16), MLP(d_out=16)
    opt = torch.optim.SGD(student.parameters(), lr=0.01)
    pool = torch.randn(40, 64, 32, generator=g)  # 40 samples of 64 rows each
    cache = LRUCache(capacity=6)
    with tracker_factory(student, optimizer=opt) as tracker:
        for step in range(steps):
            i = int(torch.randint(0, len(pool), (1,), generator=g))
            x = pool[i]
            with torch.no_grad():
                target = cache.get(i, lambda: teacher(x))
            loss = nn.functional.mse_loss(student(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
