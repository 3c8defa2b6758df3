"""The correct Transformer-XL memory update: concatenate, detach, keep the last ``mem_len`` positions.

Real case: the fix discussed in https://github.com/dhruvramani/Transformers-RL/issues/7 (``beg_idx =
max(0, end_idx - mem_len)``) and Transformer-XL's ``_update_mems``. The memory grows for the first
steps (until it holds ``mem_len=64`` positions) and then stays that size.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class RecurrentAttention(nn.Module):
    def __init__(self, d=DIM, mem_len=64):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.mem_len = mem_len
        self.mems = None

    def forward(self, h):
        ctx = h if self.mems is None else torch.cat([self.mems, h], dim=1)
        k, v = self.kv(ctx).chunk(2, dim=-1)
        att = torch.softmax(self.q(h) @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=-1)
        out = att @ v
        with torch.no_grad():
            end = ctx.shape[1]
            beg = max(0, end - self.mem_len)
            self.mems = ctx.detach()[:, beg:end].clone()
        return out


class XLModel(nn.Module):
    def __init__(self, d=DIM):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.layer = RecurrentAttention(d)
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        return self.head(self.layer(self.inp(x)).mean(1))


def run(tracker_factory, steps=30):
    g = seed(205)
    model = XLModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(16, 16, DIM, generator=g)
            y = torch.randint(0, 4, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
