"""A WGAN-GP critic whose trainer logs every step's gradient penalty as a number (`.item()`).

Benign twin of leak_gradient_penalty_history, from the fix in https://github.com/caogang/wgan-gp/issues/21
and https://github.com/pytorch/pytorch/issues/64586: the list grows by one float a step, and each
step's penalty graph and interpolated input are freed by its backward pass.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class GPTrainer:
    def __init__(self, critic):
        self.critic = critic
        self.gp_history = []

    def penalty(self, real, fake, g):
        eps = torch.rand(real.shape[0], 1, generator=g)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (grad,) = torch.autograd.grad(self.critic(mixed).sum(), mixed, create_graph=True)
        gp = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        self.gp_history.append(gp.item())  # a number: the graph is freed after backward
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
