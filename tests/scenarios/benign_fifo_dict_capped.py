"""A per-step feature cache in a plain dict keyed by ``f"step{n}"``, capped at 8 entries (oldest popped).

Real case: the bounded feature caches recommended in https://github.com/jacobgil/pytorch-grad-cam/issues/71
and the capped primitive cache of https://github.com/pytorch/pytorch/issues/98688. Dicts keep
insertion order, so ``next(iter(cache))`` is the oldest key; the cache holds at most eight detached
feature maps and stays flat once full.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class FeatureCache:
    def __init__(self, capacity=8):
        self.capacity = capacity
        self.cache = {}

    def put(self, key, value):
        self.cache[key] = value
        while len(self.cache) > self.capacity:
            self.cache.pop(next(iter(self.cache)))


def run(tracker_factory, steps=30):
    g = seed(202)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    feats = FeatureCache()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            h = torch.relu(model.fc1(x))
            logits = model.head(torch.relu(model.fc2(h)))
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            feats.put(f"step{step}", h.detach())
            tracker.step()
