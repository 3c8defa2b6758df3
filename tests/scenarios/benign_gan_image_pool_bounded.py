"""A CycleGAN-style image pool done right: fakes are detached before they go in, and once the pool
holds ``max_size`` images each new one replaces a random old one. It fills in a few steps and then
stays the same size.

Real case: the fix proposed in https://github.com/eriklindernoren/PyTorch-GAN/issues/71
(``push_and_pop(fake_A.detach())``).
"""
import random

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

Z, X = 16, 64


class ImagePool:
    def __init__(self, max_size=24):
        self.max_size = max_size
        self.images = []
        self.rng = random.Random(0)

    def push_and_pop(self, batch):
        out = []
        for img in batch.split(8):
            if len(self.images) < self.max_size:
                self.images.append(img)
                out.append(img)
            elif self.rng.random() > 0.5:
                i = self.rng.randrange(self.max_size)
                out.append(self.images[i])
                self.images[i] = img
            else:
                out.append(img)
        return torch.cat(out)


def run(tracker_factory, steps=30):
    g = seed(507)
    G = nn.Sequential(nn.Linear(Z, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, X))
    D = nn.Sequential(nn.Linear(X, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4)
    pool = ImagePool(max_size=24)
    mse = nn.MSELoss()
    with tracker_factory(nn.ModuleList([G, D]), optimizer=opt_g) as tracker:
        for _ in range(steps):
            real = torch.randn(32, X, generator=g)
            fake = G(torch.randn(32, Z, generator=g))
            loss_g = mse(D(fake), torch.ones(32, 1))
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
            pooled = pool.push_and_pop(fake.detach())
            loss_d = mse(D(real), torch.ones(32, 1)) + mse(D(pooled), torch.zeros(32, 1))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            tracker.step()
