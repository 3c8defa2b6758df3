"""A DQN replay memory preallocated as fixed tensors (states, actions, rewards, next states) and
written in place as a ring (``ptr % capacity``) with detached transitions: it fills after a few
steps and then overwrites, so its size never changes after allocation.

Real case: https://ai.stackexchange.com/questions/4080/is-it-necessary-to-clear-the-replay-memory-regularly-in-a-dqn-when-an-agent-play
("the replay memory only gets initialized once and never gets cleared ... the obvious issue of
growing too large"; answered: a finite size N keeping the last N experiences).
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class RingReplay:
    def __init__(self, capacity, dim):
        self.capacity = capacity
        self.s = torch.zeros(capacity, dim)
        self.a = torch.zeros(capacity, dtype=torch.long)
        self.r = torch.zeros(capacity)
        self.s2 = torch.zeros(capacity, dim)
        self.ptr = 0
        self.full = False

    def add(self, s, a, r, s2):
        n = s.shape[0]
        idx = (torch.arange(n) + self.ptr) % self.capacity
        self.s[idx], self.a[idx], self.r[idx], self.s2[idx] = s, a, r, s2
        self.ptr = (self.ptr + n) % self.capacity
        self.full = self.full or self.ptr < n

    def sample(self, n, g):
        hi = self.capacity if self.full else self.ptr
        i = torch.randint(0, hi, (n,), generator=g)
        return self.s[i], self.a[i], self.r[i], self.s2[i]


def run(tracker_factory, steps=30):
    g = seed(524)
    q = MLP(hidden=128, d_out=4)
    target = MLP(hidden=128, d_out=4)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    mem = RingReplay(256, DIM)
    with tracker_factory(q, optimizer=opt) as tracker:
        for step in range(steps):
            s = torch.randn(64, DIM, generator=g)
            with torch.no_grad():
                a = q(s).argmax(1)
            mem.add(s, a, torch.randn(64, generator=g), torch.randn(64, DIM, generator=g))
            bs, ba, br, bs2 = mem.sample(64, g)
            with torch.no_grad():
                tgt = br + 0.99 * target(bs2).max(1).values
            loss = nn.functional.smooth_l1_loss(q(bs).gather(1, ba[:, None]).squeeze(1), tgt)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 10 == 9:
                target.load_state_dict(q.state_dict())
            tracker.step()
