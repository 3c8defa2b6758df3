"""A hand-written prioritized replay (the sum tree of OpenAI baselines / Rainbow) for a DQN agent in the
Ape-X style: new transitions are inserted with an initial priority equal to their TD error, computed by
a forward pass of the online and target networks. That forward is not under ``torch.no_grad()``, and
the priority is written into the tree as a tensor: each leaf ``|td|`` and every internal sum above it
(``sum_tree[parent] = sum_tree[left] + sum_tree[right]``) keeps the insertion batch's autograd graph,
with the activations it saved. The learner later refreshes the priorities of the transitions it
samples with detached values, but a batch's graph stays alive as long as any one of its 32 leaves has
not been resampled, which is nearly always: one insertion graph survives per step.

Real case: Kaixhin/Rainbow https://github.com/Kaixhin/Rainbow/pull/33 ("Improve the replay memory to
avoid storing the autograd graphs in it": ``mem.update_priorities`` with tensors "was causing huge memory
leakage and slowdowns"; the fix stores the priorities in numpy arrays).
"""
import random

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "sum_tree", "top": 1}

OBS, ACTIONS = 64, 6


def qnet():
    return nn.Sequential(nn.Linear(OBS, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, ACTIONS))


class PrioritizedReplay:
    def __init__(self, capacity=4096):
        self.capacity = capacity
        self.sum_tree = [0.0] * (2 * capacity)  # node 1 is the root, leaves at capacity..2*capacity-1
        self.data = [None] * capacity
        self.next = 0
        self.size = 0

    def _set(self, idx, priority):
        i = idx + self.capacity
        self.sum_tree[i] = priority
        i //= 2
        while i >= 1:
            self.sum_tree[i] = self.sum_tree[2 * i] + self.sum_tree[2 * i + 1]
            i //= 2

    def add(self, transition, priority):
        self._set(self.next, priority)
        self.data[self.next] = transition
        self.next = (self.next + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n, rng):
        total = float(self.sum_tree[1])
        idxs = []
        for _ in range(n):
            mass, i = rng.random() * total, 1
            while i < self.capacity:
                left = float(self.sum_tree[2 * i])
                if mass <= left:
                    i = 2 * i
                else:
                    mass -= left
                    i = 2 * i + 1
            idxs.append(min(i - self.capacity, self.size - 1))
        return idxs

    def update_priorities(self, idxs, priorities):
        for i, p in zip(idxs, priorities):
            self._set(i, p)


def run(tracker_factory, steps=30):
    g = seed(412)
    rng = random.Random(412)
    online, target = qnet(), qnet()
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=1e-4)
    replay = PrioritizedReplay()
    gamma = 0.99
    with tracker_factory(online, optimizer=opt) as tracker:
        for _ in range(steps):
            # actor: a batch of 32 new transitions, inserted with their TD error as priority
            s = torch.randn(32, OBS, generator=g)
            a = torch.randint(0, ACTIONS, (32,), generator=g)
            r = torch.randn(32, generator=g)
            s2 = torch.randn(32, OBS, generator=g)
            q = online(s).gather(1, a[:, None]).squeeze(1)
            td = r + gamma * target(s2).max(1).values - q  # the leak: no torch.no_grad() here
            for j in range(32):
                replay.add((s[j], a[j], r[j], s2[j]), td[j].abs() + 1e-3)
            # learner: a prioritized batch, priorities refreshed with detached values
            idxs = replay.sample(32, rng)
            bs = torch.stack([replay.data[i][0] for i in idxs])
            ba = torch.stack([replay.data[i][1] for i in idxs])
            br = torch.stack([replay.data[i][2] for i in idxs])
            bs2 = torch.stack([replay.data[i][3] for i in idxs])
            with torch.no_grad():
                tq = br + gamma * target(bs2).max(1).values
            err = tq - online(bs).gather(1, ba[:, None]).squeeze(1)
            loss = err.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            replay.update_priorities(idxs, (err.detach().abs() + 1e-3).tolist())
            tracker.step()
