"""memleak.detect.nvml_gap: device memory outside the PyTorch allocator."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memleak.detect import nvml_gap
from memleak.run import Run
from memleak.schema import Kind

MiB, GiB = 1 << 20, 1 << 30


def make_run(gap, reserved=None, device_total=80 * GiB, seed=0):
    n = len(gap)
    rng = np.random.default_rng(seed)
    reserved = np.full(n, 20 * GiB) + rng.integers(-5, 5, n) * 20 * MiB if reserved is None else reserved
    cols = {"step": np.arange(n), "reserved_bytes": reserved.astype(float),
            "nvml_process_bytes": reserved + np.asarray(gap, dtype=float)}
    if device_total:
        cols["device_total_bytes"] = float(device_total)
    return Run({"device": "cuda:0"}, pd.DataFrame(cols))


def test_cuda_context_alone_is_normal():
    assert nvml_gap.detect(make_run(np.full(50, 500 * MiB))) == []


def test_large_static_gap():
    (f,) = nvml_gap.detect(make_run(np.full(50, 12 * GiB)))
    assert f.kind is Kind.NON_PYTORCH_MEMORY and f.leak is False and f.bytes_per_step == 0
    assert f.location == nvml_gap.LOCATION and f.total_bytes == 12 * GiB
    assert f.confidence == 0.5 and "15% of the device" in f.evidence[0]
    assert "CUBLAS_WORKSPACE_CONFIG" in f.fix


def test_threshold_scales_with_the_device():
    gap = np.full(50, 6 * GiB)
    assert nvml_gap.detect(make_run(gap, device_total=80 * GiB)) == []      # under 10% of 80 GiB
    assert len(nvml_gap.detect(make_run(gap, device_total=24 * GiB))) == 1
    assert len(nvml_gap.detect(make_run(np.full(50, 1.5 * GiB), device_total=None))) == 1   # 1 GiB floor


def test_linear_growth_is_a_leak():
    n = 60
    gap = 600 * MiB + 16 * MiB * np.arange(n) + np.random.default_rng(3).normal(0, 2 * MiB, n)
    (f,) = nvml_gap.detect(make_run(gap))
    assert f.leak is True and f.bytes_per_step == pytest.approx(16 * MiB, rel=0.05)
    assert f.confidence > 0.9
    assert any("steadily in both halves" in e for e in f.evidence)
    assert any("full in about" in e for e in f.evidence)
    assert "NCCL communicators" in f.fix


def test_step_then_plateau_is_not_growth():
    # cuDNN picks a workspace on the first convolution, NCCL on the first all-reduce: then it holds
    gap = np.r_[np.full(3, 500 * MiB), np.full(57, 800 * MiB)]
    assert nvml_gap.detect(make_run(gap)) == []
    gap = np.r_[500 * MiB + 50 * MiB * np.arange(30), np.full(30, 2000 * MiB)]   # rises, then stops
    (f,) = nvml_gap.detect(make_run(gap, device_total=None))
    assert f.leak is False and f.total_bytes == 2000 * MiB                   # large, but not growing now


def test_without_nvml():
    run = make_run(np.full(20, 12 * GiB))
    run.steps["nvml_process_bytes"] = np.nan                                 # NVML unavailable
    assert nvml_gap.detect(run) == []
    assert nvml_gap.detect(Run({}, pd.DataFrame({"step": [0, 1], "reserved_bytes": [1.0, 1.0]}))) == []
