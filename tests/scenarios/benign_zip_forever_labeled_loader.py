"""The healthy form of ``zip(itertools.cycle(labeled_loader), unlabeled_loader)``: the labeled
loader is repeated by a generator that iterates it anew at each pass, so the loop's iterator keeps
nothing but the loaders' own iterators.

Real case: the replacement for ``itertools.cycle`` in https://github.com/cgtuebingen/SSS-GS/pull/7
("Replaced ``itertools.cycle`` with a standard ``iter(dataloader)`` initialization" and a reset on
``StopIteration``), here as a generator.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "ok", "kind": None, "location": None, "top": 1}


def forever(loader):
    while True:
        yield from loader


def loader(g, n, labeled):
    x = torch.randn(n, DIM, generator=g)
    y = torch.randint(0, 4, (n,), generator=g) if labeled else torch.zeros(n, dtype=torch.long)
    return DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True, generator=g)


def run(tracker_factory, steps=30):
    g = seed(88)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    labeled, unlabeled = loader(g, 128 * 5, True), loader(g, 128 * max(steps + 8, 40), False)
    with tracker_factory(model, optimizer=opt) as tracker:
        for (x, y), (u, _) in zip(forever(labeled), unlabeled):
            sup = nn.functional.cross_entropy(model(x), y)
            p = model(u).softmax(-1)
            ent = -(p * p.clamp_min(1e-8).log()).sum(-1).mean()
            loss = sup + 0.1 * ent
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
            steps -= 1
            if steps == 0:
                break
