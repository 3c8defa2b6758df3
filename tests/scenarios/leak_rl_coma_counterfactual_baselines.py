"""A multi-agent actor-critic computes a counterfactual baseline with a helper ``cross_prod``
outside ``torch.no_grad()`` and keeps the baselines for a per-episode plot: each kept baseline
holds the critic's and the actors' graphs.

Real case: https://github.com/Bigpig4396/PyTorch-Counterfactual-Multi-Agent-Policy-Gradients-COMA/issues/4
("memory leak is caused by function cross_prod and can be avoided by adding with torch.no_grad()
before calling cross_prod").
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "baselines", "top": 1}

N_ACT = 5


def cross_prod(probs_a, probs_b):
    # joint probability of every pair of the two agents' actions
    return (probs_a[:, :, None] * probs_b[:, None, :]).flatten(1)


class COMA:
    def __init__(self):
        self.actor_a = MLP(hidden=96, d_out=N_ACT)
        self.actor_b = MLP(hidden=96, d_out=N_ACT)
        self.critic = MLP(hidden=96, d_out=N_ACT * N_ACT)
        self.baselines = []  # for plotting the baseline over training

    def parameters(self):
        for m in (self.actor_a, self.actor_b, self.critic):
            yield from m.parameters()

    def train_step(self, obs, joint_action, reward):
        pa = torch.softmax(self.actor_a(obs), -1)
        pb = torch.softmax(self.actor_b(obs), -1)
        q = self.critic(obs)
        joint = cross_prod(pa, pb)  # outside no_grad
        baseline = (joint * q).sum(1)
        self.baselines.append(baseline)  # the leak: graph through actors and critic
        q_taken = q.gather(1, joint_action[:, None]).squeeze(1)
        adv = (q_taken - baseline).detach()
        logp = torch.log(joint.gather(1, joint_action[:, None]).squeeze(1) + 1e-8)
        return -(logp * adv).mean() + nn.functional.mse_loss(q_taken, reward)


def run(tracker_factory, steps=30):
    g = seed(503)
    agent = COMA()
    model = nn.ModuleList([agent.actor_a, agent.actor_b, agent.critic])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            obs = torch.randn(96, DIM, generator=g)
            ja = torch.randint(0, N_ACT * N_ACT, (96,), generator=g)
            r = torch.randn(96, generator=g)
            loss = agent.train_step(obs, ja, r)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
