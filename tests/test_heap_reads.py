"""The C heap read on a budget where it is not the run's own memory (recorder/heap_reads.py, a
GPU run's host side): every step at first, then as the step time pays for it, at least every
MAX_GAP steps, and always where memleak's bookkeeping may keep bytes; a host leak on a heap too
slow to read every step is still found. A CPU run reads it every step unless a read costs a
tenth of one."""
from __future__ import annotations

import statistics
import time
import types

import numpy as np
import pytest

import memleak
from memleak.probes.host import heap_counter
from memleak.recorder import heap_reads
from memleak.recorder import tracker as tracker_module
from memleak.recorder.heap_reads import DENSE_STEPS, HEAP_BUDGET, MAX_GAP, HeapReads

from helpers import model_and_optimizer, train


def _clocked(monkeypatch, read_seconds: float, run_memory: bool = False) -> HeapReads:
    """HeapReads over a counter whose reads take `read_seconds` on a clock of the test's own."""
    now = [0.0]
    monkeypatch.setattr(heap_reads, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def counter() -> int:
        now[0] += read_seconds
        return 1 << 20

    return HeapReads(counter, run_memory)


def _gaps(read: list[bool]) -> list[int]:
    at = np.flatnonzero(read)
    return np.diff(at).tolist()


@pytest.mark.parametrize("read_seconds", [20e-6, 200e-6, 5e-3])
def test_reads_keep_to_their_budget_after_the_first_steps(monkeypatch, read_seconds):
    reads = _clocked(monkeypatch, read_seconds)
    step_seconds = 0.025
    read = [reads.begin(s, step_seconds, forced=lambda: False) is not None for s in range(3000)]
    assert all(read[:DENSE_STEPS])
    later = read[DENSE_STEPS:]
    spent = sum(later) * read_seconds
    budget = HEAP_BUDGET * step_seconds * len(later)
    if read_seconds * MAX_GAP <= HEAP_BUDGET * step_seconds * MAX_GAP * 2:  # cheap enough for the budget
        assert spent <= budget + read_seconds, (spent, budget)
    assert max(_gaps(read)) <= MAX_GAP
    if read_seconds <= HEAP_BUDGET * step_seconds:  # a read the budget pays every step: every step
        assert all(later)
    else:
        assert sum(later) < len(later) / 2


def test_the_heap_of_a_cpu_run_is_read_every_step_unless_a_read_costs_a_large_share_of_one(monkeypatch):
    """There it is the run's memory, where its tensors live: a read that costs under a tenth of a
    step is made every step (here 5 %); one on a heap fragmented by a leak (33 ms on 60 ms steps)
    is made as a tenth of the step time pays for it, a sampled series."""
    reads = _clocked(monkeypatch, 5e-4, run_memory=True)
    assert all(reads.begin(s, 0.01, forced=lambda: False) is not None for s in range(500))
    reads = _clocked(monkeypatch, 33e-3, run_memory=True)
    read = [reads.begin(s, 0.06, forced=lambda: False) is not None for s in range(500)]
    assert all(read[:DENSE_STEPS]) and 4 <= statistics.median(_gaps(read[DENSE_STEPS:])) <= 7


def test_a_forced_step_is_always_read_and_pays_from_the_budget(monkeypatch):
    reads = _clocked(monkeypatch, 1e-3)
    for s in range(DENSE_STEPS):
        reads.begin(s, 0.01, forced=lambda: False)
    forced = [reads.begin(s, 0.01, forced=lambda: s % 3 == 0) for s in range(DENSE_STEPS, 400)]
    assert all(v is not None for i, v in enumerate(forced) if (DENSE_STEPS + i) % 3 == 0)
    assert sum(v is not None for v in forced) < len(forced) / 3 + 30  # forced ones use up the credit


def test_a_settled_step_counts_what_the_bookkeeping_kept_only_where_it_was_read(monkeypatch):
    values = iter([100, 160, 200, 260])
    reads = HeapReads(lambda: next(values), run_memory=False)
    reads.begin(0, 0.01, forced=lambda: True)  # 100
    reads.settle(kept=True)  # 160: 60 kept
    reads.begin(1, 0.01, forced=lambda: True)  # 200
    reads.settle(kept=False)  # not read again
    assert reads.own == 60
    reads.base = None  # a step the budget did not read: nothing to measure from
    reads.settle(kept=True)
    assert reads.own == 60 and next(values) == 260


@pytest.mark.skipif(heap_counter() is None, reason="no glibc mallinfo2 here")
def test_a_host_leak_is_found_on_a_heap_too_slow_to_read_every_step(monkeypatch, tmp_path):
    """The heap read as on a GPU run (on a budget), each read made to cost 2 ms (a fragmented heap,
    many threads' arenas) on steps of about a millisecond: after the first steps it is read every
    MAX_GAP steps (and where a batch of steps is written), and a host leak of 64 KiB a step shows
    in it as it does in a dense series. (A run kept in memory, without out=, keeps every step on
    the heap: each is read.)"""
    real = heap_counter()

    def slow() -> int:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2e-3:
            pass
        return real()

    monkeypatch.setattr("memleak.probes.host.heap_counter", lambda: slow)
    monkeypatch.setattr(tracker_module, "HeapReads", lambda counter, every_step: HeapReads(counter, False))
    model, opt = model_and_optimizer()
    keep: list = []
    with memleak.track(model, optimizer=opt, level="counters", out=tmp_path / "run") as tracker:
        train(model, opt, 200, keep=keep, leak_bytes=64 * 1024)
    heap = tracker.run().steps["heap_bytes"]
    assert heap.iloc[:DENSE_STEPS].notna().all()
    assert heap.iloc[DENSE_STEPS:].notna().mean() < 0.5  # the budget thinned the reads
    report = tracker.report()
    assert report.verdict == "leak", str(report)
    assert report.growth is not None and report.growth.column == "heap_bytes"


def test_a_fall_where_memleak_released_nothing_is_not_taken_off_its_own_bytes():
    # another thread (a consumer evicting a tensor) frees 128 KiB while memleak's bookkeeping runs
    heap = [10 << 20]
    reads = HeapReads(lambda: heap[0], run_memory=True)
    for step in range(5):
        reads.begin(step, 0.01, forced=lambda: True)
        heap[0] += 2048 - (128 << 10)  # memleak keeps a step's record; the other thread frees
        reads.settle(kept=True, frees=False)
    assert reads.own == 0  # the frees are not memleak's: its own bytes do not fall
    reads.begin(5, 0.01, forced=lambda: True)
    heap[0] += 4096
    reads.settle(kept=True, frees=False)
    assert reads.own == 4096  # what it keeps still counts
    reads.begin(6, 0.01, forced=lambda: True)
    heap[0] -= 3000  # a batch written out: memleak's own records released
    reads.settle(kept=True, frees=True)
    assert reads.own == 1096


def test_a_fall_a_garbage_collection_made_during_the_bookkeeping_is_not_memleaks():
    # memleak's own objects set off Python's cyclic collector, which frees the user's garbage (an
    # awaitable in a reference cycle, 384 KiB): that fall is not memleak's, or the user's memory read
    # as heap less memleak's own would never fall back and a sawtooth would read as a leak
    import gc

    heap = [10 << 20]
    reads = HeapReads(lambda: heap[0], run_memory=True)
    reads.begin(0, 0.01, forced=lambda: True)
    gc.collect()
    heap[0] += 2048 - (384 << 10)
    reads.settle(kept=True, frees=True)
    assert reads.own == 0
    reads.begin(1, 0.01, forced=lambda: True)
    heap[0] -= 3000  # no collection: a batch written out, memleak's own records released
    reads.settle(kept=True, frees=True)
    assert reads.own == -3000


def test_the_rise_tracing_leaves_beyond_the_trend_before_it_is_memleaks_own():
    """Objects a program makes while tracemalloc traces stay on the C heap: the first read after
    tracing stopped is taken off by what it rose beyond the trend the reads before it had."""
    heap_values = iter([100, 110, 120, 130, 900, 900, 900, 200, 210])
    heap = HeapReads(lambda: next(heap_values), run_memory=True)
    for step in range(4):  # 10 bytes a step
        heap.begin(step, 0.01, lambda: False)
    values = {"step": 3, heap_reads.TRACING: (False, 50, False)}  # tracing started at step 3's end
    assert heap_reads.untraced(values, heap) == 50
    for step in (4, 5, 6):  # traced: their reads are emptied
        heap.begin(step, 0.01, lambda: False)
        values = {"step": step, "heap_bytes": heap.base, heap_reads.TRACING: (True, -50 if step == 6 else 0, False)}
        heap_reads.untraced(values, heap)
        assert values["heap_bytes"] is None
    heap_reads.untraced({"step": 6, heap_reads.TRACING: (False, 0, True)}, heap)  # stopped
    heap.begin(7, 0.01, lambda: False)  # 200 where the trend says 170: 30 are memleak's
    assert heap.own == 30
    heap.begin(8, 0.01, lambda: False)
    assert heap.own == 30  # once
