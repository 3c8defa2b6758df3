"""A policy-learning loop that collects a fresh batch of rollouts every fourth step: the agent's
``get_samples`` appends each collection (observations, actions, returns) to ``agent._samples``,
and the update uses only the newest collection. Nothing ever clears the agent's list, so it grows
by one collection every four steps: a slow, stepwise leak (flat for three steps, then a jump).

Real case: cbfinn/gps https://github.com/cbfinn/gps/pull/53 ("Fix memory 'leak' by removing old
samples from agent. Pretty sure this is okay to do since we never need the ones from previous
iterations"; the fix adds ``self.agent.clear_samples()`` each iteration).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "agent._samples", "top": 1}
COLLECT_EVERY = 4
OBS, ACTS, HORIZON = 32, 6, 512


class Agent:
    def __init__(self, g):
        self.g = g
        self._samples = []

    @torch.no_grad()
    def get_samples(self, policy):
        obs = torch.randn(HORIZON, OBS, generator=self.g)
        actions = torch.distributions.Categorical(logits=policy(obs)).sample()
        returns = torch.randn(HORIZON, generator=self.g).cumsum(0).flip(0)
        sample = {"obs": obs, "actions": actions, "returns": returns,
                  "noise": torch.randn(HORIZON, OBS, generator=self.g)}
        self._samples.append(sample)  # kept forever
        return sample


def run(tracker_factory, steps=30):
    g = seed(715)
    policy = nn.Sequential(nn.Linear(OBS, 64), nn.Tanh(), nn.Linear(64, ACTS))
    opt = torch.optim.Adam(policy.parameters(), lr=3e-4)
    agent = Agent(g)
    sample = None
    with tracker_factory(policy, optimizer=opt) as tracker:
        for step in range(steps):
            if step % COLLECT_EVERY == 0:
                sample = agent.get_samples(policy)
            idx = torch.randint(0, HORIZON, (128,), generator=g)
            logp = torch.log_softmax(policy(sample["obs"][idx]), -1)
            chosen = logp.gather(1, sample["actions"][idx, None]).squeeze(1)
            ret = sample["returns"][idx]
            loss = -(chosen * (ret - ret.mean())).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
