"""Lifetimes that end are not leaks, live or at the end; memleak's own memory is never the user's leak."""
from __future__ import annotations

import gc
import logging

import numpy as np
import pytest
import torch

import memleak
from tests import scenarios

BENIGN = [n for n in scenarios.names() if scenarios.load(n).EXPECTED["verdict"] != "leak"]


class Fired(Exception):
    pass


def _raise(growth):
    raise Fired(f"on_leak fired: {growth.column} {growth.shape} {growth.slope:.0f} B/step")


@pytest.fixture(autouse=True)
def every_live_check_runs(monkeypatch):
    """The live check normally skips checks beyond 0.5 % of the run's time; here every scheduled
    check runs, so that what is tested is its verdict, not its budget."""
    from memleak.recorder import live
    monkeypatch.setattr(live, "_LIVE_CHECK_BUDGET", 1.0)


def _live_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "memleak" and r.levelno >= logging.WARNING
            and "possible leak" in r.getMessage()]


@pytest.mark.parametrize("name", BENIGN)
def test_no_benign_scenario_fires_the_live_warning_or_on_leak(name, caplog):
    caplog.set_level(logging.WARNING, logger="memleak")
    made = []

    def factory(model, **kw):
        t = memleak.track(model, level="counters", on_leak=_raise, **kw)  # raising, as the docs suggest
        made.append(t)
        return t

    scenarios.load(name).run(factory)  # Fired would propagate out of the loop
    assert made and not made[-1].leak_confirmed
    assert not _live_warnings(caplog)


def test_a_filling_cache_of_25_entries_is_not_a_leak_live(caplog):
    caplog.set_level(logging.WARNING, logger="memleak")
    cache = {}
    with memleak.track(level="counters", on_leak=_raise) as tracker:
        for step in range(60):
            key = step % 25  # fills for 25 steps, then every lookup hits
            if key not in cache:
                cache[key] = torch.randn(256, 256)  # 256 KiB
            (cache[key] @ cache[key]).sum()
            tracker.step()
    assert not tracker.leak_confirmed and not _live_warnings(caplog)
    assert tracker.report().verdict.value != "leak"


def test_a_no_op_loop_of_30k_steps_at_counters_is_clean():
    # the live columns and records memleak keeps grow the heap ~70 B/step: its own memory, measured
    with memleak.track(level="counters", on_leak=_raise) as tracker:
        for _ in range(30_000):
            tracker.step()
    report = tracker.report()
    assert report.verdict.value == "clean", str(report)
    steps = tracker.run().steps
    if "heap_bytes" in steps:
        assert steps["memleak_bytes"].iloc[-1] > 0  # measured, not assumed


class _Node:
    """Cyclic garbage holding host memory, like a closed matplotlib figure."""

    def __init__(self):
        self.payload = bytearray(256 * 1024)
        self.me = self


def test_heap_growth_that_a_garbage_collection_gives_back_is_not_a_leak(caplog):
    caplog.set_level(logging.WARNING, logger="memleak")
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(10**9)  # the collector runs rarely in a big process: garbage waits
    try:
        with memleak.track(level="counters", on_leak=_raise) as tracker:
            for _ in range(120):
                _Node()  # unreachable at once, freed only by the cyclic collector
                tracker.step()
    finally:
        gc.set_threshold(*old)
        gc.collect()
    assert not tracker.leak_confirmed and not _live_warnings(caplog)
    # the live check collected (once when it first saw the growth, once before confirming it)
    # and the heap fell back: the growth was garbage waiting for the collector


def test_real_growth_survives_the_collection_and_is_confirmed_live():
    kept = []
    calls = []
    with memleak.track(level="counters", on_leak=calls.append) as tracker:
        for _ in range(120):
            kept.append(bytearray(256 * 1024))
            tracker.step()
    assert len(calls) == 1 and tracker.leak_confirmed


def test_live_verdict_waits_for_growth_to_last_and_keep_its_slope():
    from memleak.detect.lifetimes import LIVE_MIN_STEPS, live_verdict

    class G:
        leak, shape, column = True, "linear", "heap_bytes"

        def __init__(self, n, slope=1000.0):
            self.n_steps, self.slope = n, slope

    x = np.arange(100, dtype=float)
    rising = 1e8 + 1000 * x
    verdict, state = live_verdict(G(20), rising[:20], x[:20], None)
    assert verdict == "inconclusive" and state is not None  # too short to tell a cache from a leak
    verdict, state = live_verdict(G(LIVE_MIN_STEPS + 2), rising[:50], x[:50], state)
    assert verdict == "leak"
    # the same start, but flat since the earlier check: it stopped filling
    stopped = np.minimum(rising, rising[20])
    verdict, _ = live_verdict(G(LIVE_MIN_STEPS + 2), stopped[:50], x[:50], live_verdict(G(20), rising[:20], x[:20], None)[1])
    assert verdict == "inconclusive"
