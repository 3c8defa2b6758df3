"""A REINFORCE agent (a hand-written LightningModule-like class) collects each batch of episodes
into ``self.batch_states`` / ``self.batch_actions`` / ``self.batch_qvals`` and trains on them, but
never clears them after the update: every update trains on all episodes so far, and the lists grow.

Real case: https://github.com/Lightning-Universe/lightning-bolts/issues/399 ("The replay buffer
(states, actions, qvals lists) in Reinforce is not reinitialized after each pseudo epoch ... each
training batch has all previous episodes"), fixed in lightning-bolts#425.
"""
import torch

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "batch_states", "top": 1}

GAMMA = 0.99


class Reinforce:
    def __init__(self, g):
        self.g = g
        self.net = MLP(hidden=64, d_out=4)
        self.batch_states = []
        self.batch_actions = []
        self.batch_qvals = []

    def rollout(self, length=48):
        states = torch.randn(length, DIM, generator=self.g)
        with torch.no_grad():
            probs = torch.softmax(self.net(states), -1)
        actions = torch.multinomial(probs, 1, generator=self.g).squeeze(1)
        rewards = torch.rand(length, generator=self.g)
        qvals, run = [], 0.0
        for r in reversed(rewards.tolist()):
            run = r + GAMMA * run
            qvals.append(run)
        qvals = torch.tensor(qvals[::-1])
        return states, actions, qvals

    def training_step(self):
        s, a, q = self.rollout()
        self.batch_states.append(s)  # the leak: never reset after the update
        self.batch_actions.append(a)
        self.batch_qvals.append(q)
        states = torch.cat(self.batch_states)
        actions = torch.cat(self.batch_actions)
        qvals = torch.cat(self.batch_qvals)
        logp = torch.log_softmax(self.net(states), -1).gather(1, actions[:, None]).squeeze(1)
        return -(logp * (qvals - qvals.mean())).mean()


def run(tracker_factory, steps=30):
    g = seed(501)
    agent = Reinforce(g)
    opt = torch.optim.Adam(agent.net.parameters(), lr=1e-3)
    with tracker_factory(agent.net, optimizer=opt) as tracker:
        for _ in range(steps):
            loss = agent.training_step()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
