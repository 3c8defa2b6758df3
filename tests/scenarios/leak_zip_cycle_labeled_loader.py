"""Semi-supervised training that pairs each unlabeled batch with a labeled one through
``zip(itertools.cycle(labeled_loader), unlabeled_loader)`` in the ``for`` statement itself: the
cycle saves every labeled batch it yields, and the only reference to it is the loop's own iterator
(no variable names it).

Real case: the labeled/unlabeled pairing of https://github.com/wohlert/semi-supervised-pytorch
(issue #33, "handling the different sized labeled and unlabeled loaders": the labeled loader is
cycled to the unlabeled one's length), with the cost reported in
https://github.com/pytorch/pytorch/issues/23900 ("Memory leak when using itertools.cycle") and
https://github.com/bytedance/UNO/issues/64 ("internally caches every yielded item").
"""
from itertools import cycle

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "cycle", "top": 1}


def loader(g, n, labeled):
    x = torch.randn(n, DIM, generator=g)
    y = torch.randint(0, 4, (n,), generator=g) if labeled else torch.zeros(n, dtype=torch.long)
    return DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True, generator=g)


def run(tracker_factory, steps=30):
    g = seed(87)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 128 * max(steps + 8, 40)
    labeled, unlabeled = loader(g, n, True), loader(g, n, False)
    with tracker_factory(model, optimizer=opt) as tracker:
        for (x, y), (u, _) in zip(cycle(labeled), unlabeled):  # the leak: cycle keeps each labeled batch
            sup = nn.functional.cross_entropy(model(x), y)
            p = model(u).softmax(-1)
            ent = -(p * p.clamp_min(1e-8).log()).sum(-1).mean()  # entropy minimisation on unlabeled data
            loss = sup + 0.1 * ent
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
            steps -= 1
            if steps == 0:
                break
