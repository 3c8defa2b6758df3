"""A CycleGAN-style image pool meant to hold 50 past fakes for the discriminator: the fakes are
pushed without ``detach()`` (each keeps the generator's graph), and the count the size check reads
is never raised (``self.num_imgs + 1`` where ``+=`` was meant), so the pool never starts replacing
and grows without bound.

Real case: https://github.com/eriklindernoren/PyTorch-GAN/issues/71 ("code should be changed from
fake_A_buffer.push_and_pop(fake_A) ... to push_and_pop(fake_A.detach()) ... the graph should not be
retained in the buffer") and the image-pool OOM in
https://github.com/zackchase/mxnet-the-straight-dope/pull/293.
"""
import random

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "images", "top": 1}

Z, X = 16, 64


class ImagePool:
    def __init__(self, max_size=50):
        self.max_size = max_size
        self.num_imgs = 0
        self.images = []
        self.rng = random.Random(0)

    def push_and_pop(self, batch):
        out = []
        for img in batch.split(8):
            if self.num_imgs < self.max_size:  # always true: the count is never raised
                self.num_imgs + 1  # noqa: B018 (the bug: `+=` was meant)
                self.images.append(img)  # not detached
                out.append(img)
            else:
                i = self.rng.randrange(self.max_size)
                out.append(self.images[i])
                self.images[i] = img
        return torch.cat(out)


def run(tracker_factory, steps=30):
    g = seed(506)
    G = nn.Sequential(nn.Linear(Z, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, X))
    D = nn.Sequential(nn.Linear(X, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4)
    pool = ImagePool(max_size=50)
    mse = nn.MSELoss()
    with tracker_factory(nn.ModuleList([G, D]), optimizer=opt_g) as tracker:
        for _ in range(steps):
            real = torch.randn(32, X, generator=g)
            fake = G(torch.randn(32, Z, generator=g))
            loss_g = mse(D(fake), torch.ones(32, 1))
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
            pooled = pool.push_and_pop(fake)
            loss_d = mse(D(real), torch.ones(32, 1)) + mse(D(pooled.detach()), torch.zeros(32, 1))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            tracker.step()
