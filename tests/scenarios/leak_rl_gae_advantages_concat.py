"""An actor-critic rollout storage keeps a running tensor of advantages for normalisation
statistics, grown with ``torch.cat`` each update from value estimates that were not detached:
``self.advantages`` is rebound every step and its chain of CatBackward nodes keeps every step's
bootstrap pass of the critic (never backpropagated).

Real case: https://github.com/k4ntz/SCoBots/pull/4 ("fixed a bug causing memory leaks (was
tracking tensors without detaching them)" in their policy-gradient code).
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "advantages", "top": 1}


class RolloutStats:
    def __init__(self):
        self.advantages = torch.zeros(0)

    def gae(self, rewards, values, next_values, gamma=0.99, lam=0.95):
        adv = torch.zeros_like(values)
        last = 0.0
        for t in reversed(range(len(rewards))):
            delta = rewards[t] + gamma * next_values[t] - values[t]
            last = delta + gamma * lam * last
            adv[t] = last
        self.advantages = torch.cat([self.advantages, adv])  # the leak: values not detached
        return (adv - self.advantages.mean()) / (self.advantages.std() + 1e-8)


def run(tracker_factory, steps=30):
    g = seed(504)
    model = MLP(hidden=128, d_out=5)  # 4 logits + a value
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    stats = RolloutStats()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            obs = torch.randn(32, DIM, generator=g)
            out = model(obs)
            logits, values = out[:, :4], out[:, 4]
            actions = torch.randint(0, 4, (32,), generator=g)
            rewards = torch.randn(32, generator=g)
            next_obs = torch.randn(32, DIM, generator=g)
            next_values = model(next_obs)[:, 4]  # bootstrap values, not detached
            adv = stats.gae(rewards, values, next_values)
            logp = torch.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1)
            loss = -(logp * adv.detach()).mean() + nn.functional.mse_loss(values, rewards)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
