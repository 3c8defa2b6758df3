"""A sample-difficulty curriculum that starts after a warm-up: from step 12 on, each batch's
eight hardest inputs are copied into ``self.hard_pool`` and each later batch is topped up with
eight inputs drawn from the pool (oversampling hard cases). Nothing is ever removed from the pool:
memory is flat during the warm-up and grows by eight input rows (with their labels) every step
after it.

Real-world motivation: wandb/senpai https://github.com/wandb/senpai/pull/2347 ("Sample Difficulty
Curriculum: oversample hard training cases", ``--curriculum_warmup 10``), and the report of a leak
in such a hard-sampling mode, kwea123/nsff_pl https://github.com/kwea123/nsff_pl/issues/7
("--hard_sampling has a memory leak").
"""
import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "hard_pool", "top": 1}
D = 512


class HardCurriculum:
    def __init__(self, warmup=12, k=8):
        self.warmup, self.k = warmup, k
        self.hard_pool = []  # (x, y) pairs, never trimmed

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
        hard = per_sample.detach().topk(self.k).indices
        for i in hard.tolist():
            self.hard_pool.append((x[i].clone(), y[i].clone()))  # the leak


def run(tracker_factory, steps=30):
    g = seed(538)
    model = MLP(d_in=D)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cur = HardCurriculum()
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
