"""Pinned host memory: the CUDA host allocator's statistics parsed from the documented keys of
torch.cuda.memory.host_memory_stats(), the probe skipped on a CPU-only build, and the detector
on recorded-looking series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from memleak.detect import pinned
from memleak.probes import ProbeContext, Unavailable
from memleak.probes.pinned import PinnedProbe, host_stats_reader, pinned_values
from memleak.run import Run
from memleak.schema import Kind
from tests.helpers import FakeClock

MiB = 1 << 20

# the keys host_memory_stats() documents (torch/cuda/memory.py), with the values a run might show
RECORDED = {
    "allocations.current": 3,
    "allocations.peak": 4,
    "allocations.allocated": 9,
    "allocations.freed": 6,
    "allocated_bytes.current": 12 * MiB,
    "allocated_bytes.peak": 16 * MiB,
    "allocated_bytes.allocated": 40 * MiB,
    "allocated_bytes.freed": 28 * MiB,
    "active_requests.current": 2,
    "active_bytes.current": 8 * MiB,
    "active_bytes.peak": 12 * MiB,
    "num_host_alloc": 9,
    "num_host_free": 6,
    "host_alloc_time.total": 1200,
}


def test_columns_from_the_documented_keys():
    assert pinned_values(RECORDED) == {"pinned_bytes": 12 * MiB, "pinned_active_bytes": 8 * MiB}
    assert pinned_values({}) == {}  # an allocator not used yet (or CUDA not initialised)
    assert pinned_values({"allocated_bytes.current": None, "active_bytes.current": True}) == {}
    # the nested form the probe reads (host_memory_stats_as_nested_dict: no flattening each step)
    nested = {"allocated_bytes": {"current": 12 * MiB, "peak": 16 * MiB}, "active_bytes": {"current": 8 * MiB}}
    assert pinned_values(nested) == {"pinned_bytes": 12 * MiB, "pinned_active_bytes": 8 * MiB}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-build path")
def test_skipped_without_cuda():
    assert host_stats_reader() is None
    with pytest.raises(Unavailable, match="CUDA"):
        PinnedProbe().start(ProbeContext(device=torch.device("cpu"), level="counters"))


def _run(pinned_bytes) -> Run:
    n = len(pinned_bytes)
    steps = pd.DataFrame({"step": np.arange(n, dtype=float), "pinned_bytes": pinned_bytes})
    return Run({"device": "cuda:0", "host_memory_bytes": 64 << 30}, steps)


def test_growing_pinned_memory_is_a_leak():
    (f,) = pinned.detect(_run([8 * MiB + i * 2 * MiB for i in range(40)]))
    assert f.kind == Kind.HOST_GROWTH and f.location == pinned.LOCATION and f.leak
    assert f.bytes_per_step == pytest.approx(2 * MiB)
    assert "pinned pool grew from 8.0 MiB to 86.0 MiB" in f.evidence[0]


def test_a_pool_that_fills_once_is_a_finding():
    (f,) = pinned.detect(_run([4 * MiB] * 5 + [32 * MiB] * 35))
    assert not f.leak and f.note


def test_a_flat_pool_says_nothing():
    assert pinned.detect(_run([32 * MiB] * 40)) == []



def test_the_pool_is_read_on_a_time_budget(monkeypatch):
    from memleak.probes import budget as budget_module
    from memleak.probes import pinned as pinned_probe

    clock = FakeClock()
    monkeypatch.setattr(budget_module, "time", clock)

    def read():
        clock.now += 30e-6  # a read took 29 us on an H200
        return RECORDED

    monkeypatch.setattr(pinned_probe, "host_stats_reader", lambda: read)
    probe = PinnedProbe()
    assert probe.start(ProbeContext(device=torch.device("cuda", 0), level="counters")) == {"pinned_budget": 0.001}
    rows = []
    for step in range(600):
        clock.now += 0.011  # an 11 ms step
        rows.append(probe.sample(step, 0.011))
    read_at = [i for i, r in enumerate(rows) if r["pinned_bytes"] is not None]
    # 0.1 % of 11 ms is 11 us a step: a 30 us read about one step in three
    assert read_at[0] == 0 and 150 <= len(read_at) <= 260, len(read_at)
    assert rows[read_at[0]] == {"pinned_bytes": 12 * MiB, "pinned_active_bytes": 8 * MiB}
    assert rows[1] == {"pinned_bytes": None, "pinned_active_bytes": None}  # null, not "unchanged"


def test_a_sampled_pool_that_grows_is_still_a_leak():
    series = [8 * MiB + i * 2 * MiB if i % 3 == 0 else np.nan for i in range(60)]
    (f,) = pinned.detect(_run(series))
    assert f.leak and f.bytes_per_step == pytest.approx(2 * MiB)
