"""A WGAN-GP critic whose trainer keeps every step's gradient penalty, graph and all.

Real case: https://github.com/caogang/wgan-gp/issues/21 (memory grows each iteration around
``calc_gradient_penalty``), https://github.com/pytorch/pytorch/issues/64586 (CUDA OOM from the
penalty's ``torch.autograd.grad(..., create_graph=True)``) and
https://github.com/basiclab/GNGAN-PyTorch/issues/2 (an input made to require grad with
``x.requires_grad_(True)`` stays alive until the graph that used it is freed). The penalty is a
0-d tensor, 4 bytes a step in the list; what it keeps is its double-backward graph, the
interpolated input the graph accumulates into (a leaf only that graph holds) and the activations
saved for backward.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "trainer.gp_history", "top": 1}


class GPTrainer:
    def __init__(self, critic):
        self.critic = critic
        self.gp_history = []

    def penalty(self, real, fake, g):
        eps = torch.rand(real.shape[0], 1, generator=g)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (grad,) = torch.autograd.grad(self.critic(mixed).sum(), mixed, create_graph=True)
        gp = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        self.gp_history.append(gp)  # the leak: gp.item() would keep a number
        return gp


def run(tracker_factory, steps=30):
    g = seed(47)
    critic = nn.Sequential(nn.Linear(DIM, 128), nn.Tanh(), nn.Linear(128, 1))
    opt = torch.optim.Adam(critic.parameters(), lr=1e-4)
    trainer = GPTrainer(critic)
    with tracker_factory(critic, optimizer=opt) as tracker:
        for _ in range(steps):
            real, fake = torch.randn(64, DIM, generator=g), torch.randn(64, DIM, generator=g)
            loss = critic(fake).mean() - critic(real).mean() + 10 * trainer.penalty(real, fake, g)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
