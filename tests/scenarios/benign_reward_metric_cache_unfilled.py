"""RL fine-tuning of a small policy with a BLEU-like reward: each step samples texts from the policy,
scores them against references and does a REINFORCE update. The metric tokenizes every string
through ``functools.lru_cache(maxsize=2**16)``: sampled texts are nearly all new, so the cache gains
about 16 entries a step (a string and its tuple of tokens each), a staircase like a leak's over a
30-step run, but the cache is bounded at 65,536 entries by its ``maxsize``.

Real case: mjpost/sacrebleu https://github.com/mjpost/sacrebleu/pull/170 ("Add upper bound on LRU
cache size": "We now limit the number of items in the cache to 64K so that the memory usage is
capped ... relevant for ... when a metric is repetitively called ... such as when computing rewards
in reinforcement learning setups").
"""
import functools

import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VOCAB, LEN = 2000, 24


@functools.lru_cache(maxsize=2 ** 16)
def tokenize(text):
    return tuple(text.split())


def overlap_reward(hyp, ref):
    h, r = tokenize(hyp), tokenize(ref)
    return len(set(h) & set(r)) / max(len(h), 1)


class Policy(nn.Module):
    def __init__(self, d=DIM):
        super().__init__()
        self.ctx = nn.Linear(16, d)
        self.pos = nn.Embedding(LEN, d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, c):
        return self.head(torch.tanh(self.ctx(c)[:, None] + self.pos.weight[None]))


def run(tracker_factory, steps=30):
    g = seed(549)
    policy = Policy()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    refs = [" ".join(f"tok{t}" for t in torch.randint(0, VOCAB, (LEN,), generator=g).tolist()) for _ in range(8)]
    with tracker_factory(policy, optimizer=opt) as tracker:
        for step in range(steps):
            c = torch.randn(8, 16, generator=g)
            dist = torch.distributions.Categorical(logits=policy(c))
            tokens = dist.sample()
            hyps = [" ".join(f"tok{t}" for t in row) for row in tokens.tolist()]
            reward = torch.tensor([overlap_reward(h, r) for h, r in zip(hyps, refs)])
            loss = -((reward - reward.mean())[:, None] * dist.log_prob(tokens)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
