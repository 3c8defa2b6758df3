"""The growth detector on synthetic runs whose truth is known: shapes, warm-up, projection, findings."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memleak.detect.growth import Growth, analyze_growth, detect
from memleak.run import Run
from memleak.schema import Kind

GIB = 1 << 30
MIB = 1 << 20
META = {"device": "cuda:0", "device_total_bytes": 80 * GIB}
PROPERTY = settings(max_examples=60, deadline=None)


def make_run(y, column="allocated_bytes", meta=None, **columns) -> Run:
    y = np.asarray(y, dtype=float)
    return Run(dict(META if meta is None else meta), pd.DataFrame({"step": np.arange(len(y)), column: y, **columns}))


def noise(rng, n, baseline, rel, kind="uniform"):
    """±rel of the baseline: uniform, normal (rel is 2 SD), or allocator-like (whole 2 MiB blocks)."""
    if kind == "uniform":
        return rng.uniform(-rel, rel, n) * baseline
    if kind == "normal":
        return rng.normal(0, rel / 2, n) * baseline
    return np.round(rng.uniform(-rel, rel, n) * baseline / (2 * MIB)) * 2 * MIB


# ---------------------------------------------------------------- shapes

def test_a_leak_of_half_a_percent_per_step_is_confirmed_within_30_steps():
    rng = np.random.default_rng(0)
    t = np.arange(30)
    g = analyze_growth(make_run(GIB + 0.005 * GIB * t + noise(rng, 30, GIB, 0.01)))
    assert (g.shape, g.leak) == ("linear", True)
    assert g.slope == pytest.approx(0.005 * GIB, rel=0.2)
    assert g.p_value < 0.01 and 0.5 <= g.confidence <= 1
    assert g.column == "allocated_bytes" and g.n_steps + g.warmup_steps == 30


def test_the_warm_up_step_up_is_excluded_and_the_plateau_is_not_a_leak():
    rng = np.random.default_rng(1)
    t = np.arange(100)
    y = np.where(t < 2, GIB, 3 * GIB) + noise(rng, 100, GIB, 0.01)  # optimizer state created at step 2
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("plateau", False)
    assert g.warmup_steps == 2
    assert abs(g.slope) < 0.001 * GIB


def test_a_one_off_jump_in_an_exact_allocator_series_is_not_a_leak():
    y = np.full(40, 512 * 2_000_000.0)
    y[2:] += 1536 * MIB
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak, g.warmup_steps) == ("plateau", False, 2)
    assert g.slope == 0 and math.isnan(g.p_value)


def test_a_few_new_allocator_blocks_are_a_step_up_not_a_leak():
    y = np.full(200, 3.0 * GIB)
    for at, blocks in ((40, 2), (90, 1), (150, 3)):  # 2 MiB segments, allocated now and then
        y[at:] += blocks * 2 * MIB
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("plateau", False)


def test_a_short_noisy_step_is_not_mistaken_for_growth():
    rng = np.random.default_rng(4)  # found by hypothesis: to a rank test this looks like growth
    y = np.where(np.arange(12) < 4, MIB, 1.05 * MIB) + noise(rng, 12, MIB, 0.02, "normal")
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("plateau", False)
    assert any("one step fits" in e for e in g.evidence)


def test_a_heap_leak_of_a_few_kib_per_step_is_found_on_a_large_heap():
    rng = np.random.default_rng(8)  # like tests/scenarios on CPU: ~143 MiB of heap is PyTorch itself
    y = 143 * MIB + 8 * 1024 * np.arange(30) + rng.integers(0, 64, 30) * 16
    g = analyze_growth(make_run(y, column="heap_bytes", meta={"device": "cpu"}))
    assert (g.shape, g.leak) == ("linear", True)


def test_steady_heap_growth_with_one_jump_in_it_is_still_a_leak():
    # 18 KiB a step both before and after a ~1 MiB jump at step 16 (a batch kept per step, and
    # memory outside the loop moving once): each side keeps rising, so the jump is no plateau
    rng = np.random.default_rng(9)
    t = np.arange(30)
    y = 112 * MIB + 18 * 1024 * t + np.where(t >= 16, 980 * 1024, 0) + rng.integers(0, 64, 30) * 16
    g = analyze_growth(make_run(y, column="heap_bytes", meta={"device": "cpu"}))
    assert (g.shape, g.leak) == ("linear", True)


def test_the_warm_up_before_a_leak_is_found_from_the_data():
    t = np.arange(60)
    y = np.where(t < 3, GIB, 2 * GIB + 4 * MIB * t)
    g = analyze_growth(make_run(y))
    assert g.leak and g.warmup_steps == 3
    assert g.slope == pytest.approx(4 * MIB)
    assert g.intercept == pytest.approx(2 * GIB)


def test_gradient_accumulation_sawtooth_is_not_a_leak():
    rng = np.random.default_rng(2)
    t = np.arange(120)
    y = GIB + 200 * MIB * (t % 4) / 3 + noise(rng, 120, GIB, 0.002)  # released every 4th step
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("sawtooth", False)
    assert any("cycles of about 4 steps" in e for e in g.evidence)


def test_a_leak_under_a_sawtooth_is_found_on_the_cycle_minima():
    rng = np.random.default_rng(3)
    t = np.arange(120)
    y = GIB + 200 * MIB * (t % 4) / 3 + 3 * MIB * t + noise(rng, 120, GIB, 0.002)
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("linear", True)
    assert g.slope == pytest.approx(3 * MIB, rel=0.1)
    assert any("minima keep rising" in e for e in g.evidence)


def test_a_saturating_cache_is_bounded_not_a_leak():
    rng = np.random.default_rng(4)
    t = np.arange(150)
    y = GIB + 512 * MIB * (1 - np.exp(-t / 15)) + noise(rng, 150, GIB, 0.002)
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("bounded", False)


def test_memory_released_after_growing_is_a_drop():
    t = np.arange(100)
    y = np.where(t < 80, GIB + 8 * MIB * t, GIB)
    g = analyze_growth(make_run(y))
    assert (g.shape, g.leak) == ("drop", False)
    assert any("released" in e for e in g.evidence)


def test_a_buffer_flushed_twice_says_each_fall_not_that_memory_stayed_down():
    t = np.arange(75)
    y = GIB + 256 * 1024 * (t % 30).astype(float)  # 256 KiB a step, released at steps 30 and 60
    g = analyze_growth(make_run(y))
    assert not g.leak
    assert any("fell back 2 times" in e and "step 30" in e and "step 60" in e for e in g.evidence), g.evidence
    assert not any("stayed down" in e for e in g.evidence)


def test_growth_that_resumes_after_a_release_is_a_leak():
    t = np.arange(200)
    y = GIB + 8 * MIB * np.where(t < 40, t, t - 40)
    g = analyze_growth(make_run(y))
    assert g.leak and g.warmup_steps == 40


def test_growth_that_starts_late_is_a_leak():
    rng = np.random.default_rng(5)
    t = np.arange(100)
    y = GIB + np.where(t < 60, 0, 10 * MIB * (t - 60)) + noise(rng, 100, GIB, 0.005)
    g = analyze_growth(make_run(y))
    assert g.leak and g.warmup_steps >= 50
    assert g.slope == pytest.approx(10 * MIB, rel=0.2)


def test_a_staircase_of_allocator_blocks_is_a_leak():
    t = np.arange(200)
    g = analyze_growth(make_run(GIB + 20 * MIB * (t // 10)))  # a 20 MiB segment every 10 steps
    assert g.leak and g.slope == pytest.approx(2 * MIB, rel=0.1)


@pytest.mark.parametrize("kind", ["uniform", "normal", "allocator"])
def test_flat_noise_is_flat(kind):
    rng = np.random.default_rng(6)
    g = analyze_growth(make_run(GIB + noise(rng, 300, GIB, 0.02, kind)))
    assert not g.leak and g.shape in ("flat", "plateau", "bounded")


def test_a_constant_series_is_flat_with_no_trend():
    g = analyze_growth(make_run(np.full(50, 3.0 * GIB)))
    assert (g.shape, g.leak, g.slope) == ("flat", False, 0.0)
    assert math.isnan(g.p_value) and g.confidence == 0.0


def test_too_few_points_are_too_short():
    g = analyze_growth(make_run(GIB + MIB * np.arange(6)))
    assert (g.shape, g.leak) == ("too_short", False)


def test_a_missing_or_empty_column_is_no_data():
    assert analyze_growth(make_run(np.arange(20.0)), column="reserved_bytes").shape == "no_data"
    assert analyze_growth(make_run(np.full(20, np.nan))).shape == "no_data"
    assert analyze_growth(Run(META, pd.DataFrame({"step": range(5)}))).column is None


def test_nans_are_dropped():
    y = GIB + 4 * MIB * np.arange(60.0)
    y[::4] = np.nan
    g = analyze_growth(make_run(y))
    assert g.leak and g.slope == pytest.approx(4 * MIB) and g.n_steps == 45


def test_tensor_census_is_analysed_when_there_is_no_allocator():
    g = analyze_growth(make_run(100 * MIB + MIB * np.arange(40), column="tensor_bytes", meta={"device": "cpu"}))
    assert g.column == "tensor_bytes" and g.leak


# ---------------------------------------------------------------- projection

def test_projection_to_capacity_matches_a_hand_computation():
    t = np.arange(50)
    meta = {"device": "cuda:0", "device_total_bytes": 80 * GIB, "budget_bytes": 16 * GIB}
    y = 4 * GIB + 64 * MIB * t
    g = analyze_growth(make_run(y, meta=meta, duration=np.full(50, 0.5)))
    last = 4 * GIB + 64 * MIB * 49
    assert g.capacity_bytes == 16 * GIB
    assert g.steps_to_full == pytest.approx((16 * GIB - last) / (64 * MIB))  # 143 steps
    assert g.seconds_to_full == pytest.approx(g.steps_to_full * 0.5)
    assert any("143 more steps" in e for e in g.evidence)


def test_seconds_to_full_from_the_time_column():
    t = np.arange(50)
    g = analyze_growth(make_run(GIB + 256 * MIB * t, time=2.0 * t))
    assert g.seconds_to_full == pytest.approx(2.0 * g.steps_to_full)


def test_no_projection_without_a_leak_or_a_capacity():
    assert analyze_growth(make_run(np.full(50, GIB))).steps_to_full is None
    g = analyze_growth(make_run(GIB + MIB * np.arange(50), meta={"device": "cuda:0"}))
    assert g.leak and g.capacity_bytes is None and g.steps_to_full is None and g.seconds_to_full is None


@pytest.mark.parametrize("column", ["heap_bytes", "rss_bytes"])
def test_host_memory_is_projected_against_host_ram_on_an_accelerator_run(column):
    meta = {**META, "host_memory_bytes": 64 * GIB}
    g = analyze_growth(make_run(2 * GIB + 100 * MIB * np.arange(40), column=column, meta=meta))
    assert g.capacity_bytes == 64 * GIB and g.leak


def test_a_cpu_run_is_projected_against_its_budget_or_host_ram():
    y = 2 * GIB + 100 * MIB * np.arange(40)
    g = analyze_growth(make_run(y, column="heap_bytes", meta={"device": "cpu", "host_memory_bytes": 64 * GIB}))
    assert g.capacity_bytes == 64 * GIB
    meta = {"device": "cpu", "host_memory_bytes": 64 * GIB, "budget_bytes": 8 * GIB}
    assert analyze_growth(make_run(y, column="heap_bytes", meta=meta)).capacity_bytes == 8 * GIB


# ---------------------------------------------------------------- findings

def test_a_leak_makes_one_linear_growth_finding_with_plot_data():
    findings = detect(make_run(GIB + 4 * MIB * np.arange(60)))
    assert [f.kind for f in findings] == [Kind.LINEAR_GROWTH]
    f = findings[0]
    assert (f.detector, f.location, f.leak) == ("growth", "allocated_bytes", True)
    assert f.bytes_per_step == pytest.approx(4 * MIB) and f.total_bytes == pytest.approx(4 * MIB * 59)
    assert ".item()" in f.fix and ".detach()" in f.fix and 'level="full"' in f.fix
    assert {"slope", "intercept", "warmup_steps", "steps_to_full", "p_value", "shape"} <= set(f.data)
    json.dumps(f.data, allow_nan=False)


def test_a_clean_run_has_no_findings():
    assert detect(make_run(np.full(60, GIB))) == []
    assert detect(Run(META, pd.DataFrame({"step": range(3)}))) == []


@pytest.mark.parametrize("host", [["rss_bytes"], ["heap_bytes", "rss_bytes"]])
def test_host_growth_is_reported_beside_a_flat_device(host):
    t = np.arange(60)
    columns = {name: 3 * GIB + 50 * MIB * t for name in host}
    findings = detect(make_run(np.full(60, GIB), **columns))
    assert [(f.kind, f.location) for f in findings] == [(Kind.HOST_GROWTH, host[0])]  # the heap when there is one
    assert "DataLoader" in findings[0].fix and findings[0].leak


@pytest.mark.parametrize("rise, leak", [(0.002, False), (0.03, True)])
def test_on_a_device_run_the_heap_must_rise_a_percent_of_its_level(rise, leak):
    # what an H100 run with drifting shapes showed (tests/data/gpu/fragmenting): the libraries'
    # per-shape caches creep the heap by ~0.1 % in 60 steps; the device's memory holds the tensors
    t = np.arange(60)
    heap = 440 * MIB * (1 + rise * t / 59) + np.random.default_rng(1).uniform(0, 4096, 60)
    findings = detect(make_run(np.full(60, GIB), heap_bytes=heap))
    assert [(f.kind, f.leak) for f in findings] == ([(Kind.HOST_GROWTH, True)] if leak else [])
    cpu = make_run(heap, column="heap_bytes", meta={"device": "cpu"})
    assert [f.kind for f in detect(cpu)] == [Kind.LINEAR_GROWTH]  # on the CPU the heap holds the tensors


def test_on_a_cpu_run_the_heap_is_the_primary_series_and_no_host_growth_is_added():
    t = np.arange(60)
    run = make_run(GIB + 50 * MIB * t, column="heap_bytes", meta={"device": "cpu"}, rss_bytes=3 * GIB + 60 * MIB * t)
    assert [(f.kind, f.location) for f in detect(run)] == [(Kind.LINEAR_GROWTH, "heap_bytes")]


def test_rss_growth_on_cpu_that_the_tensor_leak_explains_is_not_reported_twice():
    t = np.arange(60)
    run = make_run(GIB + 50 * MIB * t, column="tensor_bytes", meta={"device": "cpu"},
                   rss_bytes=3 * GIB + 52 * MIB * t)
    assert [f.kind for f in detect(run)] == [Kind.LINEAR_GROWTH]


def test_the_growth_result_is_a_frozen_dataclass_with_the_agreed_fields():
    fields = list(Growth.__dataclass_fields__)
    assert fields == ["column", "shape", "leak", "warmup_steps", "slope", "intercept", "p_value", "confidence",
                      "n_steps", "capacity_bytes", "steps_to_full", "seconds_to_full", "evidence"]
    g = analyze_growth(make_run(np.full(20, GIB)))
    with pytest.raises(AttributeError):
        g.leak = True


def test_a_million_steps_are_analysed():
    # how fast: benchmarks/growth_speed.py (timings belong in benchmarks, not tests)
    rng = np.random.default_rng(7)
    t = np.arange(1_000_000)
    run = make_run(GIB + 64 * t + rng.normal(0, MIB, t.size))
    g = analyze_growth(run)
    assert g.leak and g.slope == pytest.approx(64, rel=0.05)


# ---------------------------------------------------------------- properties

baselines = st.floats(2.0**20, 2.0**36)
noise_levels = st.floats(0.0, 0.02)
noise_kinds = st.sampled_from(["uniform", "normal", "allocator"])
seeds = st.integers(0, 2**32 - 1)


@PROPERTY
@given(n=st.integers(8, 400), baseline=baselines, rel=noise_levels, kind=noise_kinds, seed=seeds)
def test_flat_noise_is_never_a_leak(n, baseline, rel, kind, seed):
    rng = np.random.default_rng(seed)
    assert not analyze_growth(make_run(baseline + noise(rng, n, baseline, rel, kind))).leak


@PROPERTY
@given(n=st.integers(12, 400), baseline=baselines, rel=noise_levels, kind=noise_kinds, seed=seeds,
       warmup=st.integers(1, 5), height=st.floats(1.05, 5.0))
def test_a_step_up_then_plateau_is_never_a_leak(n, baseline, rel, kind, seed, warmup, height):
    rng = np.random.default_rng(seed)
    y = np.where(np.arange(n) < warmup, baseline, height * baseline) + noise(rng, n, baseline, rel, kind)
    assert not analyze_growth(make_run(y)).leak


@PROPERTY
@given(cycles=st.integers(3, 100), baseline=baselines, rel=noise_levels, kind=noise_kinds, seed=seeds,
       period=st.integers(2, 8), amplitude=st.floats(0.01, 0.5), ramp=st.booleans(), warmup=st.integers(0, 3))
def test_a_sawtooth_is_never_a_leak(cycles, baseline, rel, kind, seed, period, amplitude, ramp, warmup):
    rng = np.random.default_rng(seed)
    n = max(cycles * period, 8)  # one cycle alone is a rise: it takes a few to be a sawtooth
    phase = np.arange(n) % period
    cycle = phase / (period - 1) if ramp else (phase > 0).astype(float)  # a ramp, or all high but one step
    y = 1.5 * baseline + amplitude * baseline * cycle + noise(rng, n, baseline, rel, kind)
    y[:warmup] = baseline
    assert not analyze_growth(make_run(y)).leak


@PROPERTY
@given(n=st.integers(40, 400), baseline=baselines, rel=noise_levels, kind=noise_kinds, seed=seeds,
       fill=st.floats(0.05, 1.0), tau_share=st.floats(0.0, 1.0))
def test_a_saturating_cache_is_never_a_leak(n, baseline, rel, kind, seed, fill, tau_share):
    rng = np.random.default_rng(seed)
    tau = 1 + tau_share * (n / 6 - 1)  # saturates within the run
    y = baseline + fill * baseline * (1 - np.exp(-np.arange(n) / tau)) + noise(rng, n, baseline, rel, kind)
    assert not analyze_growth(make_run(y)).leak


@PROPERTY
@given(n=st.integers(30, 400), baseline=baselines, rel=noise_levels, kind=noise_kinds, seed=seeds,
       slope=st.floats(0.005, 0.05), warmup=st.integers(0, 3), jump=st.floats(1.0, 3.0))
def test_steady_growth_of_half_a_percent_per_step_is_always_a_leak(n, baseline, rel, kind, seed, slope, warmup, jump):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = jump * baseline + slope * baseline * t + noise(rng, n, baseline, rel, kind)
    y[:warmup] = baseline
    g = analyze_growth(make_run(y))
    assert g.leak and g.shape == "linear"
    assert g.slope == pytest.approx(slope * baseline, rel=0.5)
