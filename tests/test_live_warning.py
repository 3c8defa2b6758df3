"""The live early warning: one log warning and one on_leak call as soon as a leak is confirmed."""
import logging

import pytest
import torch

import memleak

STEPS = 200


def loop(tracker, leak: bool, steps: int = STEPS):
    kept = []
    for _ in range(steps):
        x = torch.randn(256, 256)  # 256 KiB
        y = (x @ x).relu()
        if leak:
            kept.append(y)
        tracker.step()
    return kept


@pytest.mark.parametrize("level", ["counters", "full"])
def test_a_long_leaking_run_warns_exactly_once_with_the_projected_oom_step(caplog, level):
    import gc
    gc.collect()  # garbage other tests left would be given back mid-run by the live check's collection
    calls = []
    caplog.set_level(logging.WARNING, logger="memleak")
    with memleak.track(level=level, budget="2 GiB", on_leak=calls.append) as tracker:
        loop(tracker, leak=True)
    warnings = [r for r in caplog.records if r.name == "memleak" and r.levelno == logging.WARNING
                and "possible leak" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    message = warnings[0].getMessage()
    assert "runs out of memory in about" in message and "more steps" in message, message
    assert "per step" in message
    assert len(calls) == 1
    growth = calls[0]
    assert growth.leak and growth.slope > 100 * 1024 and growth.steps_to_full > 0
    assert tracker.leak_confirmed
    # the warning comes early, not at the end of the run
    step = int(message.split("at step ")[1].split(":")[0])
    assert step < STEPS // 2
    # and the run file says so too
    events = [e for e in tracker.run().events if e.get("event") == "leak_confirmed"]
    assert len(events) == 1 and events[0]["step"] == step


def test_a_clean_run_never_warns(caplog):
    calls = []
    caplog.set_level(logging.WARNING, logger="memleak")
    with memleak.track(level="counters", budget="2 GiB", on_leak=calls.append) as tracker:
        loop(tracker, leak=False)
    assert not [r for r in caplog.records if r.name == "memleak" and r.levelno >= logging.WARNING]
    assert calls == []
    assert not tracker.leak_confirmed


def test_on_leak_may_stop_the_run(caplog):
    class Stop(Exception):
        pass

    def stop(growth):
        raise Stop(growth.steps_to_full)

    caplog.set_level(logging.WARNING, logger="memleak")
    with pytest.raises(Stop):
        with memleak.track(level="counters", budget="2 GiB", on_leak=stop) as tracker:
            loop(tracker, leak=True)
    assert not tracker.active  # every hook removed despite the exception
    assert len(tracker.run().steps) < STEPS


def test_a_failing_live_check_never_breaks_the_loop(caplog, monkeypatch):
    import memleak.detect.growth as growth

    def broken(run, column=None):
        raise ZeroDivisionError("detector bug")

    monkeypatch.setattr(growth, "analyze_growth", broken)
    caplog.set_level(logging.WARNING, logger="memleak")
    with memleak.track(level="counters") as tracker:
        loop(tracker, leak=True, steps=60)  # a growing series: the screen passes it to the detector
    failures = [r for r in caplog.records if "live leak check failed" in r.getMessage()]
    assert len(failures) == 1  # said once, then turned off
    assert len(tracker.run().steps) == 60


def test_the_live_check_does_not_disturb_the_memory_it_measures():
    # In a fresh process. A clean loop never imports the growth detector (pandas, scipy: ~125 MiB
    # of RSS) and its heap never jumps. A leaking loop imports it mid-run, once the screen sees
    # memory rise; the ~20 MiB that import keeps on the C heap are memleak's own, taken off.
    import subprocess
    import sys
    code = (
        "import sys, torch, memleak\n"
        "def loop(keep):\n"
        "    with memleak.track(level='counters') as t:\n"
        "        for _ in range(60):\n"
        "            torch.randn(64, 64) @ torch.randn(64, 64)\n"
        "            if keep is not None: keep.append(torch.ones(16384))\n"
        "            t.step()\n"
        "    return t\n"
        "clean = loop(None)\n"
        "print([m for m in ('pandas', 'scipy.stats') if m in sys.modules])\n"
        "leaking = loop([])\n"
        "for t in (clean, leaking):\n"
        "    s = t.run().steps\n"
        "    if 'heap_bytes' not in s: print(-1, -1); continue\n"
        "    print(s['heap_bytes'].diff().abs().max(), (s['heap_bytes'] - s['memleak_bytes']).diff().abs().max())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    imported, clean, leaking = out.strip().splitlines()[-3:]
    assert imported == "[]", f"a clean loop imported {imported}"
    clean_jump, _ = map(float, clean.split())
    raw_jump, own_adjusted_jump = map(float, leaking.split())
    if clean_jump < 0:
        pytest.skip("no C-heap counter on this platform")
    assert clean_jump < 2 * 2**20, f"the heap jumped by {clean_jump / 2**20:.1f} MiB in one step of a clean loop"
    assert raw_jump > 4 * 2**20  # the detector was imported mid-run, on the heap this run measures...
    assert own_adjusted_jump < 2 * 2**20  # ...and counted as memleak's own


def test_the_cheap_screen_passes_growth_and_stops_flat_noise():
    import numpy as np

    from memleak.recorder.live import _trends_up
    rng = np.random.default_rng(0)
    steps = np.arange(40)
    assert all(_trends_up(1e8 + 5e5 * steps + rng.normal(0, 1e5, 40), 1e-3) for _ in range(50))
    flat = [_trends_up(1e8 + rng.normal(0, 2e4, 40), 1e-3) for _ in range(500)]
    assert sum(flat) < 0.05 * len(flat)
    assert not _trends_up(1e8 + 1e3 * steps, 1e-3)  # steady, but under the detector's least growth
    assert _trends_up(1e8 + 1e4 * steps, 1e-3)
    warm_up = np.where(steps < 4, 1e8, 1.01e8) + 10 * steps  # a jump while warming up, then flat
    assert not _trends_up(warm_up, 1e-3)
    assert not _trends_up(np.full(40, 1e8), 1e-3)
    assert not _trends_up(np.array([np.nan] * 40), 1e-3)


def test_the_live_screen_looks_past_a_warm_up_ramp():
    # A small clean loop's heap ramps up for its first ~25 steps, then stays flat; the screen on the
    # whole series passed it, and the detector (pandas, scipy: ~125 MiB) was imported mid-run.
    import numpy as np

    from memleak.recorder.live import _trends_up, later_half_rises
    rng = np.random.default_rng(1)
    steps = np.arange(60)
    ramp_then_flat = 117.5e6 + 5e5 * np.minimum(steps, 25) / 25 + rng.normal(0, 2e3, 60)
    assert _trends_up(ramp_then_flat, 1e-3)  # what fired before
    assert not later_half_rises(ramp_then_flat, 1e-3)
    leak = 117.5e6 + 2e4 * steps + rng.normal(0, 2e3, 60)
    assert later_half_rises(leak, 1e-3)


def test_garbage_the_live_check_collects_is_not_read_as_a_release():
    """The live check runs gc.collect(); the user's old cyclic garbage it frees is a drop memleak
    made, not memory the run gave back: a steady leak stays a leak."""
    import gc

    import torch

    import memleak

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    keep = []
    thresholds = gc.get_threshold()
    # the garbage waits for a collection, as it does between automatic ones (the collector stays
    # on: with it off, the live check runs no collection at all)
    gc.set_threshold(10**9)
    try:
        for _ in range(48):  # 6 MiB in reference cycles, left by earlier code
            cycle = [bytearray(128 * 1024)]
            cycle.append(cycle)
        del cycle
        with memleak.track(model, optimizer=opt, level="counters") as tracker:
            for _ in range(30):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                keep.append(torch.zeros(64 * 1024))  # 256 KiB a step
    finally:
        gc.set_threshold(*thresholds)
    events = [e.get("event") for e in tracker.run().events]
    report = tracker.report()
    assert report.verdict == "leak", (events, str(report))


def test_with_the_collector_off_the_live_check_neither_collects_nor_calls_cycles_garbage():
    """A program that runs with ``gc.disable()`` never frees its cyclic garbage: tensors kept by
    a reference cycle made every step are leaked. The live check must not run a collection
    behind its back (that would hide the leak) nor read what one would free as no leak."""
    import gc

    import torch

    import memleak

    class Node:
        def __init__(self, t):
            self.t = t
            self.me = self  # a reference cycle

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        full = gc.get_stats()[2]["collections"]
        with memleak.track(model, optimizer=opt, level="counters") as tracker:
            for _ in range(40):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                Node(torch.zeros(64 * 1024))  # 256 KiB a step, kept by the cycle only
                tracker.step()
        collections = gc.get_stats()[2]["collections"] - full
    finally:
        if was:
            gc.enable()
        gc.collect()
    events = [e.get("event") for e in tracker.run().events]
    assert collections == 0, events
    assert "gc_returned" not in events
    assert tracker.report().verdict == "leak"
