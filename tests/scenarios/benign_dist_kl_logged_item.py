"""A VAE-style encoder builds ``Normal(mu, sigma)`` posteriors every step and takes
``kl_divergence`` against a fixed prior; the distribution objects are rebuilt each step and only
``kl.item()`` is logged, so nothing from a step outlives it: memory is flat.

Real case: https://github.com/pytorch/pytorch/issues/71149 reports that with a network returning
``distributions.normal.Normal`` "memory is released as expected after each training loop" (the leak
there was specific to MultivariateNormal's cached properties); this is the well-behaved Normal
variant, a benign check for distribution objects built every step.
"""
import torch
from torch import nn
from torch.distributions import Normal, kl_divergence

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Encoder(nn.Module):
    def __init__(self, d=DIM, z=8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 2 * z))
        self.dec = nn.Linear(z, d)

    def forward(self, x):
        mu, log_sigma = self.net(x).chunk(2, -1)
        return Normal(mu, log_sigma.exp())


def run(tracker_factory, steps=30):
    g = seed(102)
    model = Encoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    prior = Normal(torch.zeros(8), torch.ones(8))
    kl_log = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(128, DIM, generator=g)
            q = model(x)
            z = q.rsample()
            recon = nn.functional.mse_loss(model.dec(z), x)
            kl = kl_divergence(q, prior).sum(-1).mean()
            loss = recon + 0.1 * kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            kl_log.append(kl.item())
            tracker.step()
