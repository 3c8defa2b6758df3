"""The twin of leak_hard_pool_after_warmup with the pool capped: a sample-difficulty curriculum
that switches on at step 24 copies each batch's eight hardest inputs into ``hard_pool``, a
``collections.deque(maxlen=64)``, and tops each later batch up with eight inputs drawn from it.
Memory is flat during the warm-up, then grows for eight steps (64 / 8) once the curriculum starts,
then stays flat: a late-starting ramp that stops, which a detector watching only the last stretch
of a run could take for a leak switching on.

Real-world motivation: wandb/senpai https://github.com/wandb/senpai/pull/2347 ("Sample Difficulty
Curriculum: oversample hard training cases", ``--curriculum_warmup``), with the bounded pool that
avoids the leak reported in kwea123/nsff_pl https://github.com/kwea123/nsff_pl/issues/7
("--hard_sampling has a memory leak").
"""
from collections import deque

import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
D = 512


class HardCurriculum:
    def __init__(self, warmup, k=8, capacity=64):
        self.warmup, self.k = warmup, k
        self.hard_pool = deque(maxlen=capacity)

    def top_up(self, x, y, g):
        if not self.hard_pool:
            return x, y
        pick = torch.randint(0, len(self.hard_pool), (self.k,), generator=g).tolist()
        hx = torch.stack([self.hard_pool[i][0] for i in pick])
        hy = torch.stack([self.hard_pool[i][1] for i in pick])
        return torch.cat([x, hx]), torch.cat([y, hy])

    def record(self, step, x, y, per_sample):
        if step < self.warmup:
            return
        for i in per_sample.detach().topk(self.k).indices.tolist():
            self.hard_pool.append((x[i].clone(), y[i].clone()))


def run(tracker_factory, steps=60):
    g = seed(2347)
    model = MLP(d_in=D)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cur = HardCurriculum(warmup=int(steps * 0.4))
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(32, D, generator=g)
            y = torch.randint(0, 4, (32,), generator=g)
            x, y = cur.top_up(x, y, g)
            per_sample = nn.functional.cross_entropy(model(x), y, reduction="none")
            opt.zero_grad()
            per_sample.mean().backward()
            opt.step()
            cur.record(step, x, y, per_sample)
            tracker.step()
