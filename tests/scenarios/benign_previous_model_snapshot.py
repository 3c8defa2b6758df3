"""A copy of the previous model kept for a proximal term (as FedProx-style or consistency
regularization does): ``prev = copy.deepcopy(model)`` every few steps replaces the last copy,
so there is one extra model, not a growing number of them.

Real case: the same ``copy.deepcopy(model)`` idiom as "Deepcopy of model keeps GPU memory"
(https://bot.dharman.net/reports.php?id=1953130), done right: one reference, rebound each time,
so the old copy is freed.
"""
import copy

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(70)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    prev = copy.deepcopy(model)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            with torch.no_grad():
                drift = sum((p - q).pow(2).sum() for p, q in zip(model.parameters(), prev.parameters()))
            opt.zero_grad()
            (loss + 1e-3 * drift).backward()
            opt.step()
            if step % 2 == 1:
                prev = copy.deepcopy(model)  # replaces the last copy
            tracker.step()
