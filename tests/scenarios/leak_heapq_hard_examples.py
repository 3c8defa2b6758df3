"""Online hard-example mining that pushes every batch's hardest samples onto a ``heapq`` with no bound.

Real case: https://github.com/deepchecks/deepchecks/pull/1341 ("having tensors with grads cached caused
major memory leak") and https://github.com/choderalab/pinot/issues/23 (everything a run produces kept
in memory). The miner keeps ``(-loss, counter, sample)`` tuples on ``hard_heap`` to replay the top-k
later, but never pops or trims the heap: it holds 16 samples (detached inputs) per step.
"""
import heapq
import itertools

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "hard_heap", "top": 1}


class HardExampleMiner:
    def __init__(self, per_batch=16):
        self.per_batch = per_batch
        self.hard_heap = []
        self._tie = itertools.count()

    def push(self, x, y, per_sample_loss):
        per_sample_loss = per_sample_loss.detach()
        top = per_sample_loss.topk(self.per_batch).indices
        for i in top.tolist():
            # the leak: pushed forever, never heappushpop'd to a fixed size
            heapq.heappush(self.hard_heap, (-float(per_sample_loss[i]), next(self._tie), x[i].clone(), int(y[i])))


def run(tracker_factory, steps=30):
    g = seed(108)
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
