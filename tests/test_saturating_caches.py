"""A cache keyed by values of a fixed set (a table per sequence-length bucket) gains new entries ever
more rarely as it fills: it is spared as a bounded container filling up is, while a holder that
gains at a steady rate, or keeps graphs, is still a leak. Pure tests on synthetic walks, and one
real loop."""

from __future__ import annotations

import numpy as np
import pytest

from memleak.detect.saturating import saturating_holders, saturation
from memleak.records import HolderRow, HoldersRecord

KIB = 1024
# level auto's walks: every other step while young, then sparse
STEPS = [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 22, 25, 27, 29, 31, 59]


def _coupon(keys: int, steps: int, seed: int) -> list[int]:
    rng, seen, counts = np.random.default_rng(seed), set(), []
    for _ in range(steps):
        seen.add(int(rng.integers(keys)))
        counts.append(len(seen))
    return counts


def _walks(counts, grad=0.0, each=64 * KIB):
    return [
        HoldersRecord(
            step=s, holders=(HolderRow(holder="rot.cache", kind="module_attr", count=c, bytes=c * each, grad=grad),)
        )
        for s, c in zip(STEPS, counts, strict=True)
    ]


def test_a_cache_of_32_keys_bends_towards_them_and_a_leak_does_not():
    filling = _coupon(32, 60, seed=0)
    keys = saturation(np.array(STEPS, float), np.array([filling[s] for s in STEPS], float))
    assert keys is not None and 24 <= keys <= 36
    steady = np.array(STEPS, float)  # one more a step
    assert saturation(steady, steady) is None
    assert saturation(steady, np.floor(steady / 3)) is None  # one every 3 steps: a staircase, no bend
    assert saturation(steady, steady * 0.7 + np.random.default_rng(0).normal(0, 1, len(STEPS))) is None
    # 500 keys: after 60 steps still close to a line, far from full
    wide = _coupon(500, 60, seed=1)
    assert saturation(steady, np.array([wide[s] for s in STEPS], float)) is None


def test_only_a_graph_free_holder_of_entries_that_do_not_grow_is_spared():
    counts = [_coupon(32, 60, seed=0)[s] for s in STEPS]
    why = saturating_holders(_walks(counts))
    assert "rot.cache gains new entries ever more rarely" in why["rot.cache"] and "fixed set" in why["rot.cache"]
    assert saturating_holders(_walks(counts, grad=1.0)) == {}  # graphs kept: a leak whatever the count
    assert saturating_holders(_walks(list(STEPS))) == {}  # a steady rise


@pytest.mark.parametrize("seed", [0])
def test_a_real_loop_with_a_table_per_length_bucket_is_not_a_leak(seed):
    import random

    import torch
    from torch import nn

    import memleak

    class Rotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = {}

        def forward(self, x):
            n = x.shape[1]
            if n not in self.cache:
                pos = torch.arange(n, dtype=torch.float32)[:, None] * torch.arange(64)[None, :]
                self.cache[n] = torch.cat([pos.sin(), pos.cos()], -1)
            return x + self.cache[n][:, : x.shape[-1]]

    torch.manual_seed(0)
    draw = random.Random(seed)
    model = nn.Sequential(Rotary(), nn.Linear(128, 128))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt) as tracker:
        for _ in range(60):
            loss = model(torch.randn(4, 64 * draw.randint(1, 32), 128)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = tracker.report()
    assert report.verdict != "leak", str(report)
    assert any("fixed set" in e for s in report.suspects for e in s.evidence) or not report.suspects, str(report)
