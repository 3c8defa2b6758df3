"""A profiler left recording: the runtime probe's `profiler_on` column and detect/profilers.py,
on synthetic runs (the detector is pure) and on real CPU loops under torch.profiler."""
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import memleak
from memleak.analysis import analyze
from memleak.detect import profilers
from memleak.probes.runtime import profiler_on
from memleak.run import Run
from memleak.schema import Kind

KiB = 1024


def _run(on, heap_per_step=64 * KiB, n=40, heap=100e6, device="cpu"):
    rng = np.random.default_rng(0)
    steps = pd.DataFrame({
        "step": range(n),
        "heap_bytes": heap + heap_per_step * np.arange(n) + rng.normal(0, 2 * KiB, n),
        "profiler_on": on if not np.isscalar(on) else [on] * n,
    })
    if device != "cpu":  # the device's allocator: flat
        steps["allocated_bytes"] = 50e6
    return Run({"device": device, "level": "counters"}, steps)


def test_the_probe_reads_whether_a_profiler_records():
    assert profiler_on() == 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert profiler_on() == 1
    assert profiler_on() == 0
    try:  # ITT (like NVTX) marks ranges for an outside tool and keeps no events: not recording here
        with torch.autograd.profiler.emit_itt():
            assert torch._C._autograd._profiler_enabled() and profiler_on() == 0
    except RuntimeError as e:  # a build without ITT
        pytest.skip(f"no ITT in this build: {e}")


def test_host_growth_while_a_profiler_records_every_step_names_the_profiler():
    (f,) = profilers.detect(_run(1))
    assert f.kind is Kind.PROFILER and f.location == "torch.profiler" and f.leak
    assert f.bytes_per_step == pytest.approx(64 * KiB, rel=0.05)
    assert "recording at 40 of the 40 steps" in f.evidence[0] and "schedule" in f.fix


def test_on_a_device_run_the_profilers_host_growth_is_judged_as_on_the_cpu():
    # The H200 case: a GPU process's heap of ~1 GB rose 2.5 MB (0.25 %) in 40 steps of recording,
    # under the 1 % a device run's heap needs; with no profiler that rise is no finding.
    run = _run(1, heap=1e9, device="cuda:0")
    (f,) = profilers.detect(run)
    assert f.kind is Kind.PROFILER and f.leak
    report = analyze(run)
    assert report.verdict == "leak" and report.suspects[0].kind is Kind.PROFILER, str(report)
    assert profilers.detect(_run([1] * 5 + [0] * 35, heap=1e9, device="cuda:0")) == []


@pytest.mark.parametrize("on, growth", [
    (0, 64 * KiB),  # growth with no profiler: some other cause
    (1, 0),  # a profiler recording while memory stays flat: no cause of anything
    ([1] * 5 + [0] * 35, 64 * KiB),  # recorded a few steps (a schedule), then stopped
])
def test_no_profiler_suspect_without_both_recording_and_growth(on, growth):
    assert profilers.detect(_run(on, growth)) == []


def _loop(tracker, model, opt, steps, prof=None):
    for _ in range(steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if prof is not None:
            prof.step()


def test_a_profiler_never_stopped_is_the_top_suspect_of_a_real_loop():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    prof.start()
    try:
        with memleak.track(model, optimizer=opt, level="counters") as tracker:
            _loop(tracker, model, opt, 40)
    finally:
        prof.stop()
    report = tracker.report()
    assert report.verdict == "leak", str(report)
    assert report.suspects[0].kind is Kind.PROFILER, str(report)
    assert tracker.run().steps["profiler_on"].eq(1).all()
