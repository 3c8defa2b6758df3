"""The bounded form of ``leak_per_sum_tree_insert_priority_graph``: the same Ape-X style DQN with
prioritized replay, written the way the fix in Rainbow stores it. Observations, actions, rewards and
priorities live in tensors preallocated for the whole capacity; the insertion TD error is computed
under ``torch.no_grad()`` and written in place into ``priorities``, and sampling draws indices with
``torch.multinomial`` over that tensor. The replay fills slots of storage that already exist, so its
size never changes and no graph survives a step.

Real case: Kaixhin/Rainbow https://github.com/Kaixhin/Rainbow/pull/33 (the fix: keep the replay memory
in preallocated arrays of plain values so no autograd graph is stored in it).
"""
import torch
from torch import nn

from ._common import seed
from .leak_per_sum_tree_insert_priority_graph import ACTIONS, OBS, qnet

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class PreallocatedPrioritizedReplay:
    def __init__(self, capacity=4096):
        self.capacity = capacity
        self.obs = torch.zeros(capacity, OBS)
        self.next_obs = torch.zeros(capacity, OBS)
        self.actions = torch.zeros(capacity, dtype=torch.long)
        self.rewards = torch.zeros(capacity)
        self.priorities = torch.zeros(capacity)
        self.next = 0
        self.size = 0

    def add_batch(self, s, a, r, s2, priority):
        n = s.shape[0]
        idx = (torch.arange(n) + self.next) % self.capacity
        self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx] = s, a, r, s2
        self.priorities[idx] = priority
        self.next = (self.next + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n, g):
        return torch.multinomial(self.priorities[: self.size], n, replacement=True, generator=g)


def run(tracker_factory, steps=30):
    g = seed(412)
    online, target = qnet(), qnet()
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=1e-4)
    replay = PreallocatedPrioritizedReplay()
    gamma = 0.99
    with tracker_factory(online, optimizer=opt) as tracker:
        for _ in range(steps):
            s = torch.randn(32, OBS, generator=g)
            a = torch.randint(0, ACTIONS, (32,), generator=g)
            r = torch.randn(32, generator=g)
            s2 = torch.randn(32, OBS, generator=g)
            with torch.no_grad():
                td = r + gamma * target(s2).max(1).values - online(s).gather(1, a[:, None]).squeeze(1)
            replay.add_batch(s, a, r, s2, td.abs() + 1e-3)
            idx = replay.sample(32, g)
            with torch.no_grad():
                tq = replay.rewards[idx] + gamma * target(replay.next_obs[idx]).max(1).values
            err = tq - online(replay.obs[idx]).gather(1, replay.actions[idx][:, None]).squeeze(1)
            loss = err.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            replay.priorities[idx] = err.detach().abs() + 1e-3
            tracker.step()
