"""A holder that gains a small tensor every several steps (a per-epoch record) is no leak at that
rate (detect/slow_records.py); the same holder filled every step, or with graphs, still is."""
from __future__ import annotations

import torch
from torch import nn

import memleak
from memleak.detect.slow_records import slow_record
from memleak.schema import Kind, Suspect


def _loop(every: int, steps: int = 40):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    confusion = {}
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        cm = torch.zeros(10, 10, dtype=torch.long)
        for step in range(steps):
            x, y = torch.randn(32, 16), torch.randint(0, 10, (32,))
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            cm += torch.bincount(y * 10 + logits.argmax(1), minlength=100).view(10, 10)
            if step % every == every - 1:  # an epoch ends: its confusion matrix is kept
                confusion[step // every] = cm
                cm = torch.zeros(10, 10, dtype=torch.long)
            tracker.step()
    return tracker.report()


def test_a_confusion_matrix_kept_each_epoch_is_a_record_not_a_leak():
    report = _loop(every=8)
    assert report.verdict.value != "leak", str(report)
    named = [s for s in report.suspects if s.location == "confusion"]
    assert named and not named[0].leak, str(report)
    assert any("record kept every few steps" in e for e in named[0].evidence)
    assert "None needed" in named[0].fix


def test_the_same_matrix_kept_every_step_is_still_a_leak():
    report = _loop(every=1)
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "confusion", str(report)


def _suspect(bps: float, kind: Kind = Kind.SURVIVING_TENSORS) -> Suspect:
    return Suspect(kind=kind, location="h", bytes_per_step=bps, total_bytes=0.0, confidence=0.8, evidence=(), fix="")


def test_only_few_small_tensors_without_graphs_read_as_a_record():
    steps = [1, 9, 17, 25, 33]
    sparse = {"steps": steps, "count": [0, 1, 2, 3, 4], "grad": [0] * 5, "nodes": [0] * 5}
    assert slow_record(_suspect(100.0), sparse)
    assert slow_record(_suspect(100.0, Kind.CACHED_TENSOR), sparse)
    assert not slow_record(_suspect(1000.0), sparse)  # 8 KiB outputs every 8 steps: a leak
    assert not slow_record(_suspect(100.0, Kind.RETAINED_GRAPH), sparse)
    assert not slow_record(_suspect(100.0), {**sparse, "grad": [0, 1, 2, 3, 4]})  # losses with their graphs
    every_step = {**sparse, "count": [0, 8, 16, 24, 32]}
    assert not slow_record(_suspect(100.0), every_step)  # a scalar kept every step
    assert not slow_record(_suspect(100.0), {**sparse, "count": [4, 4, 4, 4, 4]})  # no new tensors
