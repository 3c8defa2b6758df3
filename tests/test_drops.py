"""Sudden drops are explained as findings, never as leak suspects: a full garbage collection
freeing cycles that hold tensors, a gradient-accumulation sawtooth, the allocator's cache
released (empty_cache) and a context reset (on recorded-looking CUDA counters), and the drops
where a DataLoader starts new workers (a new epoch)."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pandas as pd
import pytest
import torch

import memleak
from memleak.detect import drops
from memleak.run import Run
from memleak.schema import Kind

MiB = 1 << 20


def _drop_findings(report):
    return [f for f in report.findings if f.kind == Kind.MEMORY_DROP]


@pytest.fixture(scope="module")
def gc_report():
    """Each step makes a reference cycle that holds a 4 MiB tensor; the collector is off until
    the loop calls gc.collect() at step 10."""
    was = gc.isenabled()
    gc.disable()
    try:
        with memleak.track(level="counters") as tracker:
            for i in range(20):
                node: dict = {"tensor": torch.ones(MiB)}
                node["self"] = node  # a cycle: only the cyclic collector frees it
                del node
                if i == 10:
                    gc.collect()
                tracker.step()
    finally:
        if was:
            gc.enable()
    gc.collect()
    return tracker.report()


def test_drop_after_gc_collect_is_explained_as_cycles(gc_report):
    found = [f for f in _drop_findings(gc_report) if f.data["cause"] == "gc"]
    assert found, str(gc_report)
    f = found[0]
    assert f.data["steps"] == [10.0] and f.note and not f.leak
    assert -f.bytes_per_step >= 30 * MiB  # the ten cycles' tensors
    assert "garbage collector" in " ".join(f.evidence) and "reference cycles" in " ".join(f.evidence)
    assert all(s.kind != Kind.MEMORY_DROP for s in gc_report.suspects)
    assert gc_report.run.steps["gc_collections"].iloc[10] > gc_report.run.steps["gc_collections"].iloc[9]


def test_findings_appear_in_text_and_html_not_as_suspects(gc_report):
    text = str(gc_report)
    assert "findings (not leaks):" in text and "memory_drop: memory drop at step 10" in text
    html = gc_report.to_html(include_plotlyjs=False)
    assert 'id="findings"' in html and "Findings (not leaks)" in html


def test_accumulation_sawtooth_is_explained():
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 2048)  # 8 MiB of weights: 8 MiB of gradients each window
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 1024)
    with memleak.track(model, optimizer=opt, level="counters") as tracker:
        for i in range(32):
            model(x).sum().backward()
            if i % 4 == 3:  # four micro-batches a window
                opt.step()
                opt.zero_grad(set_to_none=True)
            tracker.step()
    report = tracker.report()
    (f,) = _drop_findings(report)
    assert f.location == "memory drops: a sawtooth" and f.data["cause"] == "accumulation"
    assert f.data["period"] == 4 and len(f.data["steps"]) >= 6
    assert "gradient-accumulation window" in " ".join(f.evidence)
    assert not report.leak


def _cuda_run(allocated, reserved, retries=None) -> Run:
    n = len(allocated)
    frame = pd.DataFrame(
        {"step": np.arange(n, dtype=float), "allocated_bytes": allocated, "reserved_bytes": reserved}
    )
    if retries is not None:
        frame["num_alloc_retries"] = retries
    return Run({"device": "cuda:0"}, frame)


def test_empty_cache_drop_is_the_cache_not_tensors():
    allocated = [1000 * MiB] * 12
    reserved = [1500 * MiB] * 6 + [1010 * MiB] * 6
    (f,) = drops.detect(_cuda_run(allocated, reserved))
    assert f.data["cause"] == "empty_cache" and f.data["column"] == "reserved_bytes"
    assert "empty_cache" in " ".join(f.evidence) and -f.bytes_per_step == 490 * MiB
    (g,) = drops.detect(_cuda_run(allocated, reserved, retries=[0] * 6 + [1] * 6))
    assert "num_alloc_retries rose" in " ".join(g.evidence)


def test_context_reset_is_named():
    allocated = [1000 * MiB] * 6 + [0] * 6
    reserved = [1500 * MiB] * 6 + [2 * MiB] * 6
    (f,) = drops.detect(_cuda_run(allocated, reserved))
    assert f.data["cause"] == "reset" and "CUDA error" in " ".join(f.evidence)


def test_an_unexplained_drop_is_not_reported():
    allocated = [1000 * MiB] * 6 + [500 * MiB] * 6
    assert drops.detect(_cuda_run(allocated, allocated)) == []


def test_a_step_the_grad_scaler_skipped_is_named():
    allocated = [1000 * MiB] * 6 + [900 * MiB] + [1000 * MiB] * 5
    frame = pd.DataFrame(
        {
            "step": np.arange(12, dtype=float),
            "allocated_bytes": allocated,
            "reserved_bytes": [1200 * MiB] * 12,
            "grad_scale": [65536.0] * 6 + [32768.0] * 6,
        }
    )
    (f,) = drops.detect(Run({"device": "cuda:0"}, frame))
    assert f.data["cause"] == "scaler" and "from 65536 to 32768" in f.evidence[1]


def test_the_grad_scaler_is_found_and_its_scale_recorded():
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.randn(4, 8)
    with memleak.track(model, optimizer=opt, level="counters") as tracker:
        for i in range(4):
            loss = model(x).sum() * (float("inf") if i == 2 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            tracker.step()
    run = tracker.run()
    assert run.meta["grad_scaler"] is True
    assert list(run.steps["grad_scale"]) == [1024.0, 1024.0, 512.0, 512.0]
    # the skipped step called no optimizer.step(): its count stays
    assert list(run.steps["optimizer_steps"]) == [1, 2, 2, 3]


def test_the_cycles_the_census_saw_are_named():
    heap = [100 * MiB + i * 4 * MiB for i in range(8)] + [100 * MiB] * 4
    frame = pd.DataFrame(
        {
            "step": np.arange(12, dtype=float),
            "heap_bytes": heap,
            "gc_collections": [3] * 8 + [4] * 4,
            "gc_collected": [10] * 8 + [90] * 4,
        }
    )
    cohort = {"born": 4, "site": "train.py:41", "count": 4, "bytes": 16 * MiB, "grad": 4, "cycle": "grad"}
    births = [{"step": 6, "cohorts": [cohort], "gc2": 3}]
    (f,) = drops.detect(Run({"device": "cpu"}, frame, records={"births": births}))
    assert f.data["cause"] == "gc" and "freed 80 objects" in f.evidence[1]
    assert "created at train.py:41 (grad)" in f.evidence[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DataLoader workers are seen through /proc")
def test_drops_where_a_dataloader_starts_new_workers_are_epochs():
    """Each epoch keeps its outputs (8 MiB a step) and releases them when it ends: the drops fall where
    the DataLoader's worker, forked anew each epoch, appears."""
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=1, num_workers=1, multiprocessing_context="fork")
    with memleak.track(level="counters") as tracker:
        for _epoch in range(3):
            outputs = []
            for batch in loader:
                outputs.append(torch.empty(2 * MiB))  # 8 MiB on the C heap, its pages never written: cheap
                tracker.step()
            del outputs
    report = tracker.report()
    found = sorted(_drop_findings(report), key=lambda f: f.data["steps"])
    assert [(f.data["steps"], f.data["cause"]) for f in found] == [([4.0], "epoch"), ([8.0], "epoch")], str(report)
    assert all(f.note and not f.leak for f in found) and not report.suspects
    assert "DataLoader `loader` started new workers: a new epoch began" in found[0].evidence[1]
