"""A two-behaviour self-play loop (ml-agents style): each behaviour's trainer appends the
trajectories its agents collect (observations, actions, log-probs, advantages, under
``torch.no_grad()``) to its ``update_buffer`` and clears that buffer in ``_update_policy``. The
``defender`` behaviour has a small ``max_steps`` budget: once it is reached, its trainer stops
updating (``should_still_train`` turns False) but the environment still steps its agents, and
their trajectories are still appended to the buffer, which nothing clears any more. Memory is flat
(a sawtooth of one update period) until the budget runs out, about 40% into the run, and grows by
one trajectory batch a step from then on.

Real case: Unity-Technologies/ml-agents https://github.com/Unity-Technologies/ml-agents/pull/3422
("Clear update buffer when trainer isn't training to avoid memory leak"), and the earlier
https://github.com/Unity-Technologies/ml-agents/pull/2722 ("We don't clear the update buffer if
we don't update the policy").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "update_buffer", "top": 1}
OBS, ACTS, AGENTS = 48, 5, 128


class Trainer:
    def __init__(self, policy, max_steps, update_every, lr=3e-4):
        self.policy = policy
        self.opt = torch.optim.Adam(policy.parameters(), lr=lr)
        self.max_steps = max_steps
        self.update_every = update_every
        self.step = 0
        self.update_buffer = {"obs": [], "actions": [], "log_probs": [], "advantages": []}

    @property
    def should_still_train(self):
        return self.step < self.max_steps

    @torch.no_grad()
    def process_trajectory(self, obs, g):
        dist = torch.distributions.Categorical(logits=self.policy(obs))
        actions = dist.sample()
        self.update_buffer["obs"].append(obs)
        self.update_buffer["actions"].append(actions)
        self.update_buffer["log_probs"].append(dist.log_prob(actions))
        self.update_buffer["advantages"].append(torch.randn(obs.shape[0], generator=g))
        self.step += 1

    def advance(self):
        if self.should_still_train and len(self.update_buffer["obs"]) >= self.update_every:
            self._update_policy()

    def _update_policy(self):
        obs = torch.cat(self.update_buffer["obs"])
        actions = torch.cat(self.update_buffer["actions"])
        old_lp = torch.cat(self.update_buffer["log_probs"])
        adv = torch.cat(self.update_buffer["advantages"])
        lp = torch.log_softmax(self.policy(obs), -1).gather(1, actions[:, None]).squeeze(1)
        ratio = torch.exp(lp - old_lp)
        loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        for v in self.update_buffer.values():
            v.clear()
        # the fix (ml-agents #3422): also clear the buffer when should_still_train is False


def make_policy():
    return nn.Sequential(nn.Linear(OBS, 64), nn.Tanh(), nn.Linear(64, ACTS))


def run(tracker_factory, steps=60):
    g = seed(902)
    striker, defender = make_policy(), make_policy()
    trainers = [Trainer(striker, max_steps=10 ** 9, update_every=4),
                Trainer(defender, max_steps=int(steps * 0.4), update_every=4)]
    model = nn.ModuleDict({"striker": striker, "defender": defender})
    with tracker_factory(model, optimizer=trainers[0].opt) as tracker:
        for step in range(steps):
            for t in trainers:
                t.process_trajectory(torch.randn(AGENTS, OBS, generator=g), g)
                t.advance()
            tracker.step()
