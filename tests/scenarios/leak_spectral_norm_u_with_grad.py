"""A hand-written spectral normalisation (a GAN discriminator layer) whose power-iteration vector
``u`` is updated each forward *with* gradient tracking: ``self.u = normalize(W @ v)`` where ``v``
was computed from the previous ``self.u``. Every step chains its power iteration onto the last
one's, so the autograd graph reachable from ``u`` grows by a few nodes (each saving the weight and
the vectors) per step. ``sigma`` uses detached ``u``/``v`` (no gradient through the power
iteration, as in the paper), so nothing ever backpropagates through that chain or frees it.

Real case: "Possible memory leak in spectral_norm" https://github.com/pytorch/pytorch/issues/7261
(GPU memory grows every epoch with spectral_norm around Conv2d/Linear), fixed by
https://github.com/pytorch/pytorch/pull/7298 ("we do *not* need gradients for the spectral of the
weight nor u": the power iteration was moved under no_grad).
"""
import torch
from torch import nn
from torch.nn.functional import normalize

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "u", "top": 1}


class SNLinear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) / d_in ** 0.5)
        self.bias = nn.Parameter(torch.zeros(d_out))
        self.u = normalize(torch.randn(d_out), dim=0)

    def forward(self, x):
        # the leak: the power iteration should run under torch.no_grad()
        v = normalize(self.weight.t() @ self.u, dim=0)
        self.u = normalize(self.weight @ v, dim=0)
        sigma = torch.dot(self.u.detach(), self.weight @ v.detach())  # no gradient through u, v
        return nn.functional.linear(x, self.weight / sigma, self.bias)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = SNLinear(DIM, 256)
        self.l2 = SNLinear(256, 1)

    def forward(self, x):
        return self.l2(nn.functional.leaky_relu(self.l1(x), 0.2))


def run(tracker_factory, steps=30):
    g = seed(103)
    D = Discriminator()
    opt = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    with tracker_factory(D, optimizer=opt) as tracker:
        for _ in range(steps):
            real = torch.randn(64, DIM, generator=g) + 1
            fake = torch.randn(64, DIM, generator=g)
            loss = nn.functional.softplus(-D(real)).mean() + nn.functional.softplus(D(fake)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
