"""A CPU run whose C heap stays flat while its resident memory grows: what grows is outside malloc
(a native library's own mappings), judged on RSS; pages of a memory-mapped file read for the first
time grow RSS too, and are no leak (detect/growth.py)."""
from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest
import torch

import memleak
from tests.helpers import model_and_optimizer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc's heap")

MIB = 1 << 20


def _libc():
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _train(steps: int, each_step) -> memleak.Report:
    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="counters") as tracker:
        for step in range(steps):
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
            each_step(step)
    return tracker.report()


def test_memory_a_native_library_maps_and_never_unmaps_is_a_leak_of_rss():
    libc, mapped = _libc(), []

    def native_scratch(step):  # a C extension's scratch buffer, mapped per call, never unmapped
        p = libc.mmap(None, MIB, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
        ctypes.memset(p, 1, MIB)
        mapped.append(p)

    try:
        report = _train(80, native_scratch)
    finally:
        for p in mapped:
            libc.munmap(p, MIB)
    assert report.verdict == "leak"
    top = report.suspects[0]
    assert (top.kind, top.location) == ("linear_growth", "rss_bytes")
    assert 0.9 * MIB <= top.bytes_per_step <= 1.1 * MIB
    assert "outside malloc" in top.fix


def test_a_memory_mapped_file_read_for_the_first_time_is_no_leak(tmp_path):
    path = tmp_path / "rows.npy"
    np.save(path, np.ones((80 * 512, 256), dtype=np.float32))  # 40 MiB, read 512 KiB a step
    rows = np.load(path, mmap_mode="r")
    report = _train(80, lambda step: float(np.asarray(rows[step * 512:(step + 1) * 512]).sum()))
    assert report.verdict != "leak", report.suspects[:1]


def test_rss_memleak_takes_when_it_imports_mid_run_is_not_the_programs():
    # in a fresh process the live check's first test imports numpy's and scipy's modules: RSS rose
    # by 138 MiB at once, of which only 33 MiB were counted as memleak's own heap bytes
    from memleak.io import run_from_records

    records = [{"type": "header", "schema": 1, "device": "cpu", "level": "auto", "host_memory_bytes": 32 << 30}]
    for step in range(100):
        imported = step >= 57
        records.append({
            "type": "step", "step": step, "time": step * 0.01, "duration": 0.01,
            "heap_bytes": (112 << 20) + imported * (33 << 20) + step % 3 * 4096,
            "memleak_bytes": 16_000 + imported * (33 << 20),
            "rss_bytes": (325 << 20) + step * (MIB // 2) + imported * (138 << 20),
            "rss_shared_bytes": (91 << 20) + imported * (59 << 20),
        })
    report = memleak.analyze(run_from_records(records))
    assert report.verdict == "leak"
    top = report.suspects[0]
    assert (top.kind, top.location) == ("linear_growth", "rss_bytes")
    assert 0.45 * MIB <= top.bytes_per_step <= 0.55 * MIB
    assert report.growth.column == "rss_bytes"  # the verdict quotes it, with the time left
    assert "linear_growth at rss_bytes" in str(report) and "is full in about" in str(report).split("\n\n")[1]
    ax = report.plot().axes[0]  # memory.png draws the series that grows, with its trend
    assert ax.get_title(loc="left").startswith("rss_bytes: linear (leak)")
    assert "process RSS" in [line.get_label() for line in ax.get_lines()]



def _rss_run(free_per_step: float) -> memleak.Run:
    """80 steps of a flat C heap and RSS growing 400 KiB a step, its free bytes growing
    `free_per_step` (as glibc reports them beside RSS)."""
    import pandas as pd

    n = 80
    steps = pd.DataFrame({
        "step": range(n), "time": [0.01 * i for i in range(n)],
        "heap_bytes": [112 * MIB + (i % 3) * 512 for i in range(n)],
        "rss_bytes": [300 * MIB + 400 * 1024 * i for i in range(n)],
        "heap_free_bytes": [2 * MIB + free_per_step * i for i in range(n)],
    })
    return memleak.Run({"device": "cpu", "level": "counters"}, steps)


def test_rss_grown_by_freed_memory_malloc_keeps_is_fragmentation_not_a_leak():
    """RSS rising while the heap's bytes in use stay flat and its free bytes (glibc's fordblks: freed
    memory kept for reuse, behind allocations that pin it) rise with it: the heap is fragmented (a
    `torch.stack` of a deque of 50 feature maps each step grew them 8 -> 28 MiB, RSS with them)."""
    report = memleak.analyze(_rss_run(300 * 1024))
    assert report.verdict != "leak", str(report)
    top = report.suspects[0]
    assert (top.kind, top.location, top.leak) == ("fragmentation", "rss_bytes", False), str(report)
    assert any("free bytes" in e for e in top.evidence) and "MALLOC_TRIM_THRESHOLD_" in top.fix
    assert not any(e.startswith("at this rate") for e in top.evidence)
    outside = memleak.analyze(_rss_run(0.0))  # free bytes flat: what grows is outside malloc, as before
    assert outside.verdict == "leak" and outside.suspects[0].kind == "linear_growth"
    assert "outside malloc" in outside.suspects[0].fix


def test_the_host_probe_writes_the_heaps_free_bytes_beside_rss():
    report = _train(40, lambda step: None)
    steps = report.run.steps
    assert "heap_free_bytes" in steps
    read = steps["rss_bytes"].notna()
    assert (steps.loc[read, "heap_free_bytes"] > 0).all() and steps.loc[~read, "heap_free_bytes"].isna().all()
