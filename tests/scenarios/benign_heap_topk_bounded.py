"""The bounded form of ``y_heapq_hard_examples``: a min-heap of the 64 hardest samples, kept with ``heappushpop``.

Real case: online hard example mining with a fixed-size pool, the fix implied by
https://github.com/deepchecks/deepchecks/pull/1341 (do not cache everything). Once the heap holds 64
samples each new one replaces the easiest, so the pool fills over the first four steps and then
stays the same size.
"""
import heapq
import itertools

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class HardExampleMiner:
    def __init__(self, capacity=64, per_batch=16):
        self.capacity = capacity
        self.per_batch = per_batch
        self.hard_heap = []  # min-heap on the loss: the root is the easiest kept sample
        self._tie = itertools.count()

    def push(self, x, y, per_sample_loss):
        per_sample_loss = per_sample_loss.detach()
        top = per_sample_loss.topk(self.per_batch).indices
        for i in top.tolist():
            item = (float(per_sample_loss[i]), next(self._tie), x[i].clone(), int(y[i]))
            if len(self.hard_heap) < self.capacity:
                heapq.heappush(self.hard_heap, item)
            else:
                heapq.heappushpop(self.hard_heap, item)


def run(tracker_factory, steps=30):
    g = seed(204)
    model = MLP(d_in=512, hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    miner = HardExampleMiner()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, d=512)
            per_sample = nn.functional.cross_entropy(model(x), y, reduction="none")
            loss = per_sample.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            miner.push(x, y, per_sample)
            tracker.step()
