"""A run that ends with memory rising gets one garbage collection as the tracker closes: growth it
gives back (cyclic garbage the collector had not reached yet) is no leak; growth it does not give
back stays one; a program that keeps the collector off is not collected behind its back; a run
whose memory does not rise is not collected at all."""
import gc

import numpy as np
import pandas as pd
import pytest

import memleak
from memleak.detect.growth import analyze_growth
from memleak.run import Run
from memleak.schema import GC_AT_END

STEPS = 30  # too short for the live check to confirm anything: the end's collection decides
KIB = 1024


class _Node:
    """Cyclic garbage holding host memory: unreachable at once, freed only by the cyclic collector."""

    def __init__(self):
        self.payload = bytearray(256 * KIB)
        self.me = self


@pytest.fixture
def collector_waits():
    """The collector runs rarely (as in a big process, or when memleak's objects shift its turns)."""
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(10**9)
    yield
    gc.set_threshold(*old)
    gc.collect()


def _loop(make, level="full"):
    with memleak.track(level=level) as tracker:
        for _ in range(STEPS):
            make()
            tracker.step()
    run = tracker.run()
    return tracker.report(), [e for e in run.events if e.get("event") == GC_AT_END]


def _heap_run(report) -> bool:
    return "heap_bytes" in report.run.steps


def test_cyclic_garbage_the_end_collection_gives_back_is_no_leak(collector_waits):
    report, events = _loop(_Node)
    if not _heap_run(report):
        pytest.skip("no glibc heap counter here")
    assert report.verdict.value != "leak", str(report)
    assert events and events[0]["freed"]["heap_bytes"] >= 8 * 256 * KIB
    assert "cyclic garbage" in " ".join(report.growth.evidence)


def test_growth_the_collection_does_not_give_back_stays_a_leak(collector_waits):
    kept = []
    report, events = _loop(lambda: kept.append(bytearray(256 * KIB)))
    if not _heap_run(report):
        pytest.skip("no glibc heap counter here")
    assert report.verdict.value == "leak", str(report)
    assert events and events[0]["freed"]["heap_bytes"] < 256 * KIB * 4


def test_a_program_that_keeps_the_collector_off_is_not_collected():
    gc.collect()
    gc.disable()
    try:
        report, events = _loop(_Node, level="counters")
        assert [o for o in gc.get_objects() if type(o) is _Node]  # memleak freed none of its garbage
    finally:
        gc.enable()
        gc.collect()
    assert not events
    if _heap_run(report):
        assert report.verdict.value == "leak", str(report)


def test_a_run_whose_memory_does_not_rise_is_not_collected():
    report, events = _loop(lambda: bytearray(256 * KIB), level="counters")
    assert not events and report.verdict.value == "clean", str(report)


def _rising_run(freed: float) -> Run:
    y = 100e6 + 256 * KIB * np.arange(STEPS, dtype=float)
    steps = pd.DataFrame({"step": np.arange(STEPS), "heap_bytes": y})
    return Run({"device": "cpu"}, steps, events=[{"event": GC_AT_END, "step": STEPS - 1, "freed": {"heap_bytes": freed}}])


def test_the_growth_detector_weighs_what_the_collection_gave_back():
    rise = 256 * KIB * (STEPS - 1)
    given_back = analyze_growth(_rising_run(0.8 * rise), "heap_bytes")
    assert not given_back.leak and given_back.shape.value == "sawtooth" and given_back.confidence < 0.5
    assert given_back.steps_to_full is None
    kept = analyze_growth(_rising_run(0.1 * rise), "heap_bytes")
    assert kept.leak and kept.shape.value == "linear"
