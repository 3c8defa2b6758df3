"""A Transformer-XL style recurrence whose memory is concatenated but never cut back to ``mem_len``.

Real case: https://github.com/dhruvramani/Transformers-RL/issues/7 ("Bugs report about memory
mechanism": ``update_mem`` computes the wrong begin index, so the kept memory is not the last
``mem_len`` positions). The segment-level memory ``self.mems`` is detached (no graph is kept) but the
slice that should keep its last ``mem_len`` steps is written with the wrong start, so it keeps all.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "mems", "top": 1}


class RecurrentAttention(nn.Module):
    def __init__(self, d=DIM, mem_len=16):
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
            new = ctx.detach()
            end = new.shape[1]
            beg = max(0, end - self.mem_len - end)  # bug: subtracts end twice, always 0
            self.mems = new[:, beg:end].clone()  # the leak: keeps the whole history
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
    g = seed(114)
    model = XLModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(16, 16, DIM, generator=g)  # one 16-token segment of a long stream
            y = torch.randint(0, 4, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
