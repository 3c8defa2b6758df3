"""memleak.detect.fragmentation on synthetic step series whose truth is known."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memleak.detect import fragmentation as frag
from memleak.run import Run
from memleak.schema import Kind

MiB, GiB = 1 << 20, 1 << 30
DEVICE = 80 * GiB


def make_run(allocated, reserved, meta=None, **columns) -> Run:
    n = len(allocated)
    steps = pd.DataFrame({"step": np.arange(n), "time": np.arange(n, dtype=float),
                          "allocated_bytes": np.asarray(allocated, dtype=float),
                          "reserved_bytes": np.asarray(reserved, dtype=float),
                          "device_total_bytes": float(DEVICE), **columns})
    return Run({"device": "cuda:0", **(meta or {})}, steps)


def noisy_flat(level, n=60, spread=64 * MiB, seed=0):
    return level + np.random.default_rng(seed).uniform(-spread, spread, n)


def in_segments(x, seg=20 * MiB):
    """Reserved memory comes in whole segments."""
    return np.ceil(np.asarray(x) / seg) * seg


def fragmenting(n=60, meta=None):
    """Flat live memory; the cache creeps up 30 MiB/step as freed blocks go unused;
    the allocator starts to flush and retry late in the run."""
    allocated = noisy_flat(4 * GiB, n)
    reserved = in_segments(6 * GiB + 30 * MiB * np.arange(n))
    split = 0.3 * (reserved - allocated)
    retries = np.maximum(0, np.arange(n) - 45)
    return make_run(allocated, reserved, meta, inactive_split_bytes=split, num_alloc_retries=retries,
                    num_ooms=np.zeros(n), requested_bytes=allocated * 0.98)


def test_fragmenting_cache():
    (f,) = frag.detect(fragmenting())
    assert f.kind is Kind.FRAGMENTATION and f.leak is False and f.detector == "fragmentation"
    assert f.bytes_per_step == pytest.approx(30 * MiB, rel=0.1)
    assert f.location == "PyTorch caching allocator (fragmented cache)"
    assert f.confidence >= 0.9
    assert any("grew 30." in e and "freed blocks are not being reused" in e for e in f.evidence)
    assert any("retry cudaMalloc 14 times" in e for e in f.evidence)
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f.fix and "pad them" in f.fix
    assert "batch size" not in f.fix


@pytest.mark.parametrize("reserve_end, fragmented", [(1142 * MiB, False), (12072 * MiB, True)])
def test_a_reserve_that_follows_a_growing_peak_is_not_fragmentation(reserve_end, fragmented):
    # the H100 run with lengths drifting upward: live memory at step ends flat at 129 MiB, the step's
    # peak rising to 963 MiB; the reserve ended at 1,142 MiB with expandable segments, 12,072 without
    n = 60
    t = np.arange(n) / (n - 1)
    allocated = np.full(n, 129 * MiB)
    peak = np.maximum.accumulate(350 * MiB + 613 * MiB * t)
    reserved = in_segments(400 * MiB + (reserve_end - 400 * MiB) * t, seg=2 * MiB)
    run = make_run(allocated, reserved, allocated_peak_bytes=peak)
    found = frag.detect(run)
    assert bool(found) == fragmented, found
    if fragmented:
        assert any("12.5x the most memory ever live (963.0 MiB)" in e for e in found[0].evidence), found[0].evidence


def test_stable_large_cache_is_not_a_problem():
    n = 80
    allocated = 20 * GiB + 20 * GiB * (np.arange(n) % 4) / 3          # sawtooth: accumulation over 4 micro-steps
    reserved = np.full(n, 60 * GiB)                                    # big, but it stays put
    run = make_run(allocated, reserved, inactive_split_bytes=np.full(n, 30 * GiB),
                   num_alloc_retries=np.zeros(n), requested_bytes=allocated * 0.97,
                   reserved_peak_bytes=reserved, allocated_peak_bytes=allocated + 5 * GiB)
    assert frag.detect(run) == []


def test_warm_up_ramp_is_not_creep():
    n = 60
    reserved = np.minimum(np.arange(1, n + 1) * 3 * GiB, 12 * GiB)    # the cache fills over 4 steps, then holds
    allocated = np.minimum(np.arange(1, n + 1) * 2 * GiB, 6 * GiB) + noisy_flat(0, n, 16 * MiB)
    assert frag.detect(make_run(allocated, reserved)) == []


def test_a_leak_is_left_to_the_growth_detectors():
    n = 60
    allocated = 2 * GiB + 10 * MiB * np.arange(n)
    reserved = in_segments(allocated + 100 * MiB)                      # the cache follows live memory
    run = make_run(allocated, reserved, inactive_split_bytes=reserved - allocated,
                   requested_bytes=allocated, num_alloc_retries=np.zeros(n))
    assert frag.detect(run) == []


def test_device_too_small():
    n = 40
    allocated = noisy_flat(50 * GiB, n)
    run = make_run(allocated, np.full(n, 79 * GiB), allocated_peak_bytes=np.full(n, 77 * GiB),
                   num_alloc_retries=np.arange(n) // 5, num_ooms=np.zeros(n))
    (f,) = frag.detect(run)
    assert f.location.startswith("device memory") and f.leak is False
    assert f.total_bytes == 77 * GiB
    assert "batch size" in f.fix and "torch.utils.checkpoint" in f.fix and "mixed precision" in f.fix
    assert "PYTORCH_CUDA_ALLOC_CONF" not in f.fix                      # no allocator setting makes room


def test_settings_already_set_are_not_suggested_again():
    run = fragmenting(meta={"pytorch_cuda_alloc_conf": "expandable_segments:True"})
    (f,) = frag.detect(run)
    assert f.fix.count("expandable_segments") == 1
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:128," in f.fix
    assert "garbage_collection_threshold:0.8" in f.fix                # retries: the reserve hits the device
    conf = "expandable_segments:True,max_split_size_mb:256,garbage_collection_threshold:0.6"
    (f,) = frag.detect(fragmenting(meta={"pytorch_cuda_alloc_conf": conf}))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in f.fix and "pad them" in f.fix


def test_async_backend_gets_no_native_settings():
    (f,) = frag.detect(fragmenting(meta={"pytorch_cuda_alloc_conf": "backend:cudaMallocAsync"}))
    assert "expandable_segments" not in f.fix and "pad them" in f.fix


def test_stranded_split_memory_under_pressure():
    n = 40
    reserved = np.full(n, 70 * GiB)                                    # 87.5% of the device
    run = make_run(noisy_flat(40 * GiB, n), reserved, inactive_split_bytes=np.full(n, 25 * GiB))
    (f,) = frag.detect(run)
    assert any("stranded in split segments" in e for e in f.evidence)
    assert f.confidence == pytest.approx(0.6)
    assert "garbage_collection_threshold:0.8" in f.fix
    # the same split share with room to spare is just a cache
    run = make_run(noisy_flat(20 * GiB, n), np.full(n, 30 * GiB), inactive_split_bytes=np.full(n, 10 * GiB))
    assert frag.detect(run) == []


def test_rounding_waste():
    n = 30
    allocated = noisy_flat(8 * GiB, n)
    (f,) = frag.detect(make_run(allocated, allocated + GiB, requested_bytes=allocated * 0.6))
    assert f.location.endswith("(blocks much bigger than the requests they serve)")
    assert f.total_bytes == pytest.approx(0.4 * 8 * GiB, rel=0.02) and f.confidence == pytest.approx(0.4)
    assert "pad them" in f.fix


def test_ooms_without_full_device():
    n = 20
    allocated = noisy_flat(30 * GiB, n)
    (f,) = frag.detect(make_run(allocated, np.full(n, 40 * GiB), num_ooms=(np.arange(n) >= 15).astype(float)))
    assert f.location == "PyTorch caching allocator (fragmented cache)"
    assert any("raised 1 out-of-memory errors" in e for e in f.evidence)


def test_missing_or_short_columns():
    assert frag.detect(Run({}, pd.DataFrame({"step": [0, 1], "tensor_bytes": [1.0, 2.0]}))) == []
    short = make_run([GiB] * 3, [2 * GiB] * 3)
    assert frag.detect(short) == []
    nan = make_run([np.nan] * 10, [np.nan] * 10)
    assert frag.detect(nan) == []


def test_device_total_prefers_budget_then_device():
    run = fragmenting()
    assert frag.device_total(run) == DEVICE
    run.meta["budget_bytes"] = 10 * GiB
    assert frag.device_total(run) == 10 * GiB
    assert frag.device_total(Run({"host_memory_bytes": 1}, pd.DataFrame({"step": [0]}))) is None


def test_parse_alloc_conf():
    assert frag.parse_alloc_conf("expandable_segments:True, max_split_size_mb:128,") == {
        "expandable_segments": "True", "max_split_size_mb": "128"}
    assert frag.parse_alloc_conf("") == {} and frag.parse_alloc_conf(None) == {}


def test_trend_helpers():
    rng = np.random.default_rng(1)
    line = 5.0 * np.arange(50) + rng.normal(0, 1, 50)
    g = frag.steady_growth(line)
    assert g.steady and g.slope == pytest.approx(5, rel=0.05) and g.rise == pytest.approx(245, rel=0.05)
    step_then_flat = np.where(np.arange(50) < 25, np.arange(50), 25) + rng.normal(0, 0.1, 50)
    assert not frag.steady_growth(step_then_flat).steady
    assert frag.steady_growth(np.ones(5)) is None
    assert not frag.steady_growth(np.ones(20)).steady
    assert frag.settle_index(np.r_[[1, 5, 9], np.full(30, 10)]) == 2
    assert frag.settle_index(np.arange(30.0)) == 10                    # never settles: a third of the run
