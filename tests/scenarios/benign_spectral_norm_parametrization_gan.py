"""A small GAN whose discriminator layers are wrapped in
``torch.nn.utils.parametrizations.spectral_norm``: every training-mode forward runs one power
iteration that updates the ``_u``/``_v`` buffers in place under ``torch.no_grad()``, and the
normalised weight is rebuilt per call and freed with the step's graph. The discriminator runs three
times a step (real, fake detached, fake for the generator), so buffers change constantly and
weights are recomputed constantly, but nothing accumulates: memory is flat.

Real case: the fix of "Possible memory leak in spectral_norm"
https://github.com/pytorch/pytorch/issues/7261 by https://github.com/pytorch/pytorch/pull/7298
("we do *not* need gradients for the spectral of the weight nor u": the power iteration runs
under no_grad), here through the parametrization API that carries it today.
"""
import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
Z, D = 16, 64


def run(tracker_factory, steps=30):
    g = seed(7298)
    gen = nn.Sequential(nn.Linear(Z, 128), nn.ReLU(), nn.Linear(128, D))
    disc = nn.Sequential(spectral_norm(nn.Linear(D, 256)), nn.LeakyReLU(0.2),
                         spectral_norm(nn.Linear(256, 256)), nn.LeakyReLU(0.2),
                         spectral_norm(nn.Linear(256, 1)))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    with tracker_factory(disc, optimizer=opt_d) as tracker:
        for step in range(steps):
            real = torch.randn(128, D, generator=g) * 0.5 + 1.0
            fake = gen(torch.randn(128, Z, generator=g))
            d_loss = bce(disc(real), torch.ones(128, 1)) + bce(disc(fake.detach()), torch.zeros(128, 1))
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = bce(disc(fake), torch.ones(128, 1))
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
            tracker.step()
