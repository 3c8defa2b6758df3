"""An RL lab's agent "body" records each step's data-space entry for later analysis: the action
probabilities of its eight environments and the reward vector, as small detached tensors in a
list ``body.data_history`` that nothing trims. The leak is slow, about 1 KiB a step, and it sits
next to a large, noisy steady state: each update replays a minibatch whose size is drawn anew
every step (256 to 2048 transitions of 512 features), so the per-step allocations swing by
megabytes and then are freed. A profiler that looks at totals sees noise; only the history list
grows.

Real case: kengz/SLM-Lab https://github.com/kengz/SLM-Lab/pull/163 ("remove data space history":
"debug and fix memory growth (cause: data space saving history)", "remove history saving
altogether").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "data_history", "top": 1}
OBS, ACTS, ENVS = 512, 6, 8


class Body:
    def __init__(self):
        self.data_history = []  # one entry per env step, never trimmed
        self.total_reward = 0.0

    def update(self, action_probs, reward):
        self.data_history.append({"action_probs": action_probs, "reward": reward})
        self.total_reward += float(reward.sum())


def run(tracker_factory, steps=30):
    g = seed(163)
    net = nn.Sequential(nn.Linear(OBS, 256), nn.ReLU(), nn.Linear(256, ACTS))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    body = Body()
    with tracker_factory(net, optimizer=opt) as tracker:
        for step in range(steps):
            with torch.no_grad():
                state = torch.randn(ENVS, OBS, generator=g)
                probs = torch.softmax(net(state), -1)
            reward = torch.randn(ENVS, generator=g)
            body.update(probs, reward)
            n = int(torch.randint(256, 2049, (1,), generator=g))
            batch = torch.randn(n, OBS, generator=g)
            target = torch.randn(n, ACTS, generator=g)
            loss = nn.functional.mse_loss(net(batch), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
