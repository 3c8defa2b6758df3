"""A per-length positional-encoding cache on the module: it fills during warm-up (four lengths) and stays.

Real case: a bounded cache that grows until its capacity, https://github.com/pytorch/pytorch/issues/98688
("the primitive cache has made the memory increase at the beginning when it hasn't reached the
maximum cache capacity size").
"""
import math

import torch
from torch import nn

from ._common import DIM, seed


class PosEnc(nn.Module):
    def __init__(self, d=DIM):
        super().__init__()
        self.d = d
        self.table = {}

    def forward(self, x):
        n = x.shape[1]
        if n not in self.table:
            pos = torch.arange(n).unsqueeze(1)
            div = torch.exp(torch.arange(0, self.d, 2) * (-math.log(10000.0) / self.d))
            pe = torch.zeros(n, self.d)
            pe[:, 0::2] = torch.sin(pos * div)
            pe[:, 1::2] = torch.cos(pos * div)
            self.table[n] = pe
        return x + self.table[n]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = PosEnc()
        self.body = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        return self.body(self.pos(x)).mean(1)


EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(25)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lengths = [8, 16, 24, 32]
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            n = lengths[step % 4] if step < 8 else lengths[int(torch.randint(0, 4, (1,), generator=g))]
            x = torch.randn(16, n, DIM, generator=g)
            y = torch.randint(0, 4, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
