"""Attention weights returned by ``nn.MultiheadAttention(need_weights=True)`` gathered per layer for plots.

Real case: https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/119 ("Attention
weight plot": get them with ``return_attns=True`` and plot) -- done during training, the maps are
collected in a ``defaultdict(list)`` keyed by layer name, undetached, and never cleared.
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import DIM, seed


class Encoder(nn.Module):
    def __init__(self, d=DIM, layers=2):
        super().__init__()
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, 4, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        maps = {}
        for i, a in enumerate(self.attn):
            out, w = a(x, x, x, need_weights=True, average_attn_weights=False)
            x = x + out
            maps[f"layer{i}"] = w
        return self.head(x.mean(1)), maps


EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "attn_store", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(116)
    model = Encoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    attn_store = defaultdict(list)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(8, 24, DIM, generator=g)
            y = torch.randint(0, 4, (8,), generator=g)
            logits, maps = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            for name, w in maps.items():
                attn_store[name].append(w)  # the leak: maps kept with their graph, for a plot at the end
            tracker.step()
