"""A GAN trainer (two models, two optimizers) renders the generator's output on a fixed noise batch
every other step for a progress grid and keeps the frames on ``self.progress``, without
``torch.no_grad()`` or ``detach()``: every frame holds the generator's graph.

Real case: https://github.com/akanimax/msg-gan-v1/issues/2 ("self.create_grid(self.gen(fixed_input),
gen_img_files) seems to use a massive amount of GPU memory when training ... After removing it, I
went from having out of memory errors to have 7GB freed").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "progress", "top": 1}

Z, X = 16, 64


class GANTrainer:
    def __init__(self, g):
        self.g = g
        self.G = nn.Sequential(nn.Linear(Z, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, X), nn.Tanh())
        self.D = nn.Sequential(nn.Linear(X, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.fixed_z = torch.randn(64, Z, generator=g)
        self.progress = []
        self.bce = nn.BCEWithLogitsLoss()

    def d_step(self, real):
        fake = self.G(torch.randn(real.shape[0], Z, generator=self.g)).detach()
        loss = self.bce(self.D(real), torch.ones(real.shape[0], 1)) + \
            self.bce(self.D(fake), torch.zeros(real.shape[0], 1))
        self.opt_d.zero_grad()
        loss.backward()
        self.opt_d.step()

    def g_step(self, n):
        fake = self.G(torch.randn(n, Z, generator=self.g))
        loss = self.bce(self.D(fake), torch.ones(n, 1))
        self.opt_g.zero_grad()
        loss.backward()
        self.opt_g.step()

    def snapshot(self):
        samples = self.G(self.fixed_z)  # the leak: outside no_grad, not detached
        self.progress.append(torch.clamp(samples / 2 + 0.5, 0, 1))


def run(tracker_factory, steps=30):
    g = seed(505)
    tr = GANTrainer(g)
    model = nn.ModuleDict({"G": tr.G, "D": tr.D})
    with tracker_factory(model, optimizer=tr.opt_g) as tracker:
        for step in range(steps):
            real = torch.randn(64, X, generator=g).tanh()
            tr.d_step(real)
            tr.g_step(64)
            if step % 2 == 0:
                tr.snapshot()
            tracker.step()
