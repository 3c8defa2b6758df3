"""The auto level: counters every step, full detail in windows (at the start, when memory starts to
grow, and on a time budget); the run says which steps had which level; memory stays bounded."""
from __future__ import annotations

import inspect
from array import array

import numpy as np
import pytest
import torch
from torch.nn.modules import module as module_hooks

import memleak
from memleak.recorder import escalation, live
from memleak.recorder.escalation import AutoLevel
from memleak.schema import DEFAULT_LEVEL, DetailReason
from tests.helpers import make_model


def _series(values) -> dict[str, array]:
    return {"step": array("d", range(len(values))), "heap_bytes": array("d", values)}


def test_auto_is_the_default_everywhere():
    from memleak.integrations import pytest_plugin, zero_code
    from memleak.integrations._fit import FitSession  # noqa: F401  (the callbacks' session)

    assert DEFAULT_LEVEL == "auto"
    assert memleak.track(make_model()).level == "auto"
    assert inspect.signature(memleak.Tracker).parameters["level"].default == "auto"
    import argparse
    parser = argparse.ArgumentParser()
    zero_code.add_arguments(parser)
    assert parser.parse_args(["x.py"]).level == "auto"
    assert "DEFAULT_LEVEL" in inspect.getsource(pytest_plugin.MemleakCheck.__call__)
    for name in ("lightning", "huggingface"):
        src = (memleak.__file__.rsplit("/", 1)[0] + f"/integrations/{name}.py")
        assert "level: str = DEFAULT_LEVEL" in open(src).read()


def test_a_flat_series_opens_only_the_start_window():
    auto = AutoLevel()
    assert auto.begin() == (None, DetailReason.START)  # the young steps: each probe as at level full
    rng = np.random.default_rng(0)
    heap = list(1e8 + rng.integers(-4096, 4096, size=400).astype(float))
    changes = []
    for step in range(400):
        # detail steps cost 3 plain steps, a plain step 10 ms
        change = auto.after(step, 0.03 if auto.on else 0.01, 0.01 * step, _series(heap[: step + 1]))
        if change is not None:
            changes.append((step + 1, *change))
    assert changes[0] == (escalation.YOUNG_STEPS, False, DetailReason.WINDOW_END)
    assert all(why != DetailReason.GROWTH for _, _, why in changes), changes


def test_growth_opens_a_window_and_the_next_waits_until_the_run_is_twice_as_long():
    auto = AutoLevel()
    auto.begin()
    heap = [1e8 + 50_000 * i for i in range(200)]
    opened = []
    for step in range(200):
        change = auto.after(step, 0.01, 0.01 * step, _series(heap[: step + 1]))
        if change is not None and change[0]:
            opened.append((step + 1, change[1]))
    growth = [s for s, why in opened if why == DetailReason.GROWTH]
    # as soon as the screen has its rows after the start window (a window's own rows are left out)
    first = escalation.YOUNG_STEPS + escalation.SCREEN_MIN_ROWS
    assert growth and first <= growth[0] <= first + escalation.SCREEN_EVERY
    assert all(b >= escalation.GROWTH_SPACING * a for a, b in zip(growth, growth[1:], strict=False))
    assert len(growth) <= 5  # 10, 20, 40, 80, 160: spread over the run, not every step


def test_sampled_windows_keep_to_their_budget():
    auto = AutoLevel()
    auto.begin()
    heap = [1e8] * 20_000  # no growth: only sampled windows after the start
    full = 0
    elapsed = 0.0
    for step in range(20_000):
        seconds = 0.02 if auto.on else 0.01  # a detail step costs one plain step more
        full += auto.on
        elapsed += seconds
        auto.after(step, seconds, elapsed, _series(heap[max(0, step - 70): step + 1]))
        if auto.check_due:
            auto.check(step, (), turn_off=None)
    assert auto.windows >= 2  # sampled ones, after the young steps
    # the young steps are a start-up cost, not the budget's; so are the checks (a log(n) cost,
    # a walk at the end of a counters step: no detail step)
    assert 0 < auto.checks <= 20
    windows = full - escalation.YOUNG_STEPS
    assert 0 < windows <= auto.windows * escalation.WINDOW_STEPS
    extra = windows * 0.01
    assert extra <= escalation.SAMPLE_BUDGET * elapsed * 1.2


def _train(model, opt, steps, tracker, keep=None):
    for _ in range(steps):
        loss = model(torch.randn(8, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if keep is not None:
            # the leak: each loss keeps its graph, and 64 KiB beside it, so the heap's rise clears the
            # 0.1 % of its level the growth screen needs however much the process has imported
            # (a test suite's 200 MiB heap hid the losses alone now and then)
            keep.append((loss, torch.randn(64, 256)))
        tracker.step()


@pytest.fixture
def screen_every_few_steps(monkeypatch):
    """The growth screen on every SCREEN_EVERY-th step: these steps take a millisecond, and its
    time budget (a share of the step time) would space it out past the end of the test."""
    monkeypatch.setattr(escalation, "SCREEN_BUDGET", 1e9)


def _leaking(steps: int):
    """The tracker of a run at the default level whose loop keeps a tensor every step (in `keep`)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    with memleak.track(model) as tracker:
        _train(model, opt, steps, tracker, keep=kept)
    return tracker


def test_a_leak_at_auto_is_named_and_the_report_says_which_steps_had_full_detail(screen_every_few_steps):
    report = _leaking(60).report()
    assert report.verdict.value == "leak"
    assert report.suspects[0].location == "keep", str(report)  # the list _train appends to
    spans = report.run.detail_spans()
    assert spans[0] == (0, escalation.YOUNG_STEPS - 1, "full", "start")
    assert any(level == "full" and why == "growth" for _, _, level, why in spans)
    assert any(level == "counters" for _, _, level, _ in spans) or len(spans) > 1
    assert f"full detail on steps 0-{escalation.YOUNG_STEPS - 1} (start)" in str(report)


def test_module_memory_is_measured_in_the_windows_not_in_the_young_steps(screen_every_few_steps, module_reads_affordable):
    """The per-module reads (four a module call, a heap walk each on CPU) would cost a young run a
    step's time for a figure no verdict needs: auto reads them in its windows."""
    run = _leaking(80).run()
    windows = [(a, b) for a, b, level, why in run.detail_spans() if level == "full" and why != "start"]
    assert windows, run.detail_spans()
    recs = run.records["modules"]
    young = [r for r in recs if r["step"] < escalation.YOUNG_STEPS]
    in_windows = [r for r in recs if any(a <= r["step"] <= b for a, b in windows)]
    assert young and not any(r["counter"] for r in young)
    assert in_windows and in_windows[0]["counter"]  # the first window's first detail step reads them


def test_between_windows_no_hook_is_installed_and_no_tensor_is_tagged():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    with memleak.track(model) as tracker:
        for step in range(40):
            auto = tracker._auto
            seen.append((step, auto.on, bool(module_hooks._global_forward_pre_hooks),
                         torch.overrides._get_current_function_mode() is not None))
            _train(model, opt, 1, tracker)
    off = [s for s in seen if not s[1]]
    assert off, "a clean loop fell back to counters after the start window"
    assert not any(hooked or tagging for _, _, hooked, tagging in off), off
    assert any(tagging for _, on, _, tagging in seen if on)  # the windows do tag


def test_the_live_columns_stay_bounded_however_long_the_run(monkeypatch):
    monkeypatch.setattr(live, "LIVE_ROWS", 64)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sizes = {}
    with memleak.track(model, optimizer=opt) as tracker:
        for n in (300, 600):
            for _ in range(n - len(sizes) * 300):
                model(torch.randn(2, 64)).sum().backward()
                opt.step()
            probes = {p.name: p for p in tracker._probes}
            sizes[n] = (len(tracker._live.series["step"]), len(probes["tensors"].births),
                        len(probes["tensors"].saved), len(probes["modules"].outputs))
        steps = np.frombuffer(tracker._live.series["step"], dtype=np.float64)
        stride = tracker._live.stride
    assert sizes[600][0] < 64 and stride >= 8
    assert (steps % stride == 0).all() and (np.diff(steps) == stride).all()
    assert sizes[600][1:] <= tuple(2 * max(v, 50) for v in sizes[300][1:]), sizes  # no per-step growth


@pytest.mark.parametrize("level", ["counters", "full"])
def test_a_fixed_level_is_one_span(level):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, level=level) as tracker:
        _train(model, opt, 5, tracker)
    assert tracker.run().detail_spans() == [(0, 4, level, "fixed")]


def _retained(tracker) -> dict[str, int]:
    """Items memleak holds in memory for one run: the live columns, the probes' tags, weak
    references and holder names, the writer's in-memory records (none while the file is written)."""
    probes = {p.name: p for p in tracker._probes}
    tensors, modules = probes["tensors"], probes["modules"]
    return {
        "live rows": len(tracker._live.series["step"]),
        "births": len(tensors.births),
        "saved": len(tensors.saved),
        "saved cohorts": len(tensors.saved_tagged),
        "site holders": len(tensors.site_holders) + len(tensors.named_sites),
        "module outputs": len(modules.outputs),
        "writer records": len(tracker.sink._records),
    }


def test_what_auto_holds_in_memory_does_not_grow_with_the_steps(
    tmp_path, monkeypatch, screen_every_few_steps, heap_read_every_step
):
    """A leaking run (the leak's own tensors kept by the test) at the default level: what memleak
    keeps after 360 steps is no more than after 120, whatever the windows sampled meanwhile."""
    monkeypatch.setattr(live, "LIVE_ROWS", 64)
    # windows whatever detail costs: a test worker's fragmented heap made it dear enough that the
    # budget allowed none (CI); this test is about what they leave behind, not how many there are
    monkeypatch.setattr(escalation, "SAMPLE_BUDGET", 1.0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    counts = {}
    with memleak.track(model, optimizer=opt, out=tmp_path) as tracker:
        for n in (120, 360):
            while tracker.iterations < n:
                loss = model(torch.randn(2, 64)).sum()
                loss.backward()
                opt.step()
                kept.append(torch.randn(512))  # a leak: growth windows keep opening
            counts[n] = _retained(tracker)
            ages = {p.name: p for p in tracker._probes}["tensors"].ages._seen  # first seen, by the walks
            assert len(ages) <= len(kept) + 200, len(ages)  # live ones only (the leak's, the model's)
        windows = tracker._auto.windows
    assert windows >= 2, windows  # detail was sampled after the young steps: the probes had work
    assert counts[360]["live rows"] < 64 and counts[360]["writer records"] == 0, counts
    for item, at_120 in counts[120].items():
        assert counts[360][item] <= max(at_120, 64), (item, counts)  # bounded, not per step


def test_a_heap_creeping_while_the_process_warms_up_opens_no_growth_window():
    """A clean loop's C heap creeps by tens of bytes on most steps (allocator caches) with a few
    KiB now and then: it rises on most steps and its tau is high, but the rise is far below what
    the growth detector calls growth, so the screen opens no window; a 64 KiB/step leak on the
    same heap does."""
    rng = np.random.default_rng(0)
    n = escalation.SCREEN_ROWS
    creep = 150 * 2**20 + np.cumsum(np.where(rng.random(n) < 0.1, 2048.0, 32.0))
    leak = 150 * 2**20 + 65536.0 * np.arange(n)
    min_rel = escalation.min_rel_growth("heap_bytes")
    assert escalation.rising(creep) and not escalation.rising(creep, min_rel)  # the floor decides
    assert escalation.rising(leak, min_rel)
    series = {"step": array("d", range(n)), "heap_bytes": array("d", creep)}
    assert not escalation.screen(series)
    series["heap_bytes"] = array("d", leak)
    assert escalation.screen(series)


def test_the_first_sampled_window_waits_until_the_run_can_pay_for_it():
    """No window has been measured yet: one is taken to cost UNMEASURED_DETAIL plain steps a step,
    so a short clean run gets no sampled window it cannot afford (it used to count as free)."""
    auto = AutoLevel()
    auto.begin()
    heap = [1e8] * 6000
    plain = 0.01
    elapsed = 0.0
    first = None
    for step in range(6000):
        elapsed += 0.03 if auto.on else plain
        change = auto.after(step, 0.03 if auto.on else plain, elapsed, _series(heap[max(0, step - 70): step + 1]))
        if change is not None and change[1] == DetailReason.SAMPLE:
            first = step + 1
            break
    guess = escalation.WINDOW_STEPS * escalation.UNMEASURED_DETAIL * plain
    assert first is not None
    assert first > escalation.YOUNG_STEPS + escalation.SAMPLE_GAP  # the gap alone would have opened it here
    # it opens on the first step the budget pays for it
    assert guess <= escalation.SAMPLE_BUDGET * elapsed < guess + escalation.SAMPLE_BUDGET * plain


def test_the_screen_s_plain_python_precheck_never_drops_a_series_the_full_test_passes():
    """`may_rise` runs first and alone on a clean run's series, so it must pass every series
    `rising` passes: flat, noisy, creeping, stepped, staircased, falling, with NaN gaps and
    negative values, at the floors of the heap, RSS and no floor."""
    rng = np.random.default_rng(1)
    n = escalation.SCREEN_ROWS
    passed = failed = 0
    for trial in range(3000):
        base = rng.choice([0.0, -1e6, 1e8])
        kind = trial % 5
        noise = rng.normal(0, rng.choice([1.0, 1e3, 1e5]), n)
        if kind == 0:
            y = base + noise
        elif kind == 1:
            y = base + rng.choice([1.0, 1e2, 1e4, 1e6]) * np.arange(n) + noise
        elif kind == 2:
            y = base + np.cumsum(np.where(rng.random(n) < 0.15, rng.choice([1e4, 1e6]), 0.0)) + noise * 0.01
        elif kind == 3:
            y = base - 1e3 * np.arange(n) + noise
        else:
            y = base + np.where(np.arange(n) > n // 2, 1e6, 0.0) + noise
        y[rng.random(n) < rng.choice([0.0, 0.3])] = np.nan
        for min_rel in (0.0, escalation.min_rel_growth("heap_bytes"), escalation.min_rel_growth("rss_bytes")):
            if escalation.rising(y, min_rel):
                passed += 1
                assert escalation.may_rise(list(y), min_rel), (trial, min_rel)
            elif not escalation.may_rise(list(y), min_rel):
                failed += 1
    assert passed > 500 and failed > 500, (passed, failed)  # both sides were tried


def test_one_slow_screen_does_not_put_the_next_one_past_the_run(monkeypatch):
    """The first screen that computes a tau imports numpy (about a second, once): at 0.6 ms a step
    that alone would push the next screen hundreds of thousands of steps on, and a leak starting
    after it would open no window. The next screen comes within SCREEN_ROWS steps."""
    import time as _time

    auto = AutoLevel()
    auto.plain = 0.0006
    monkeypatch.setattr(escalation, "screen", lambda series, since=0: _time.sleep(0.2) or False)
    assert auto._screen(300, {}) is False
    assert 300 < auto.next_screen <= 300 + escalation.SCREEN_ROWS
