"""A Gaussian policy (PPO-style) keeps each step's ``Normal(mu, sigma)`` "old policy" object in a
list, for a KL penalty against the old policies that is computed "later", and the list is never
cleared. ``mu`` and ``sigma`` come straight out of the network, outside ``torch.no_grad()``, so
every kept distribution holds its loc/scale tensors and the autograd graph that produced them (the
update does its own forward and never backpropagates through the kept objects).

Real case: "Memory leak in distributions.multivariate_normal.MultivariateNormal"
https://github.com/pytorch/pytorch/issues/71149 (a network that returns a distribution object;
memory not released while those objects live) and pyro https://github.com/pyro-ppl/pyro/issues/1499
("Memory leak while using Beta distribution": RAM grows with iterations when a network outputs the
parameters of a distribution each step).
"""
import torch
from torch import nn
from torch.distributions import Normal

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "old_dists", "top": 1}


class GaussianPolicy(nn.Module):
    def __init__(self, d=DIM, act=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh())
        self.mu = nn.Linear(128, act)
        self.log_std = nn.Linear(128, act)

    def forward(self, s):
        h = self.body(s)
        return Normal(self.mu(h), self.log_std(h).clamp(-5, 2).exp())


class PPOLearner:
    def __init__(self, policy):
        self.policy = policy
        self.opt = torch.optim.Adam(policy.parameters(), lr=3e-4)
        self.old_dists = []  # the leak: one graph-carrying Normal per step, never cleared

    def act(self, s, g):
        dist = self.policy(s)  # no torch.no_grad() while acting
        self.old_dists.append(dist)
        return dist.sample(), dist

    def update(self, s, a, adv):
        logp = self.policy(s).log_prob(a).sum(-1)
        loss = -(logp * adv).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


def run(tracker_factory, steps=30):
    g = seed(101)
    policy = GaussianPolicy()
    learner = PPOLearner(policy)
    with tracker_factory(policy, optimizer=learner.opt) as tracker:
        for _ in range(steps):
            s = torch.randn(128, DIM, generator=g)
            a, _ = learner.act(s, g)
            adv = torch.randn(128, generator=g)
            learner.update(s, a, adv)
            tracker.step()
