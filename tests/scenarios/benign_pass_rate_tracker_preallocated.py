"""A pass-rate curriculum: per-sample statistics (attempt counts, pass rate and its EMA) kept in
numpy arrays preallocated for the whole dataset and updated in place at the sampled indices; the
next batch is drawn with probabilities from the EMA pass rate. The arrays are allocated once, before
the loop: every step writes into them, none grows them.

Real case: LLM360/Reasoning360 https://github.com/LLM360/Reasoning360/pull/153 (a pass-rate tracker
with ``np.zeros(dataset_size)`` arrays per statistic, updated per sample index; the review discusses
their fixed size, "very expensive on memory", allocated up front).
"""
import numpy as np
import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class PassRateTracker:
    def __init__(self, n, alpha=0.1):
        self.alpha = alpha
        self.attempt_counts = np.zeros(n, dtype=np.int32)
        self.pass_rate = -5 * np.ones(n, dtype=np.float32)
        self.ema_pass_rate = -5 * np.ones(n, dtype=np.float32)

    def update(self, idx, passed):
        self.attempt_counts[idx] += 1
        seen = self.pass_rate[idx] >= 0
        self.pass_rate[idx] = np.where(seen, self.pass_rate[idx] + (passed - self.pass_rate[idx]) / self.attempt_counts[idx], passed)
        self.ema_pass_rate[idx] = np.where(seen, (1 - self.alpha) * self.ema_pass_rate[idx] + self.alpha * passed, passed)

    def sample(self, rng, k):
        w = np.where(self.ema_pass_rate < 0, 2.0, 1.0 - self.ema_pass_rate + 0.05)
        return rng.choice(len(w), size=k, replace=False, p=w / w.sum())


def run(tracker_factory, steps=30):
    g = seed(547)
    n = 20000
    data_x = torch.randn(n, 32, generator=g)
    data_y = torch.randint(0, 4, (n,), generator=g)
    rng = np.random.default_rng(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    tracker_stats = PassRateTracker(n)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            idx = tracker_stats.sample(rng, 64)
            t = torch.from_numpy(idx)
            logits = model(data_x[t])
            loss = nn.functional.cross_entropy(logits, data_y[t])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker_stats.update(idx, (logits.argmax(-1) == data_y[t]).float().numpy())
            tracker.step()
