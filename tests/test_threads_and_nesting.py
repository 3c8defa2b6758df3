"""One tracker driven from several threads, trackers nested in one thread, and what memleak keeps
after a run ends: every mode and hook gone from every thread, step numbers once each and in order,
one warning for nested trackers and one for a leak they both see, nothing pinned by exit hooks."""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

import memleak


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))


def _installed() -> dict:
    """What of torch's per-thread modes and hooks this thread has on."""
    return {
        "function modes": torch._C._len_torch_function_stack(),
        "dispatch mode": _get_current_dispatch_mode(),
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False),
    }


NOTHING = {"function modes": 0, "dispatch mode": None, "saved-tensor hooks": None}


def _train_step(model, opt):
    loss = model(torch.randn(8, 16)).softmax(-1).pow(2).mean()  # softmax saves its output
    opt.zero_grad()
    loss.backward()
    opt.step()


class Turns:
    """Threads taking turns in a fixed order (so that a step begins in one thread and ends in another)."""

    def __init__(self, order):
        self.order = list(order)
        self.cond = threading.Condition()

    def wait(self, me, timeout=30):
        with self.cond:
            if not self.cond.wait_for(lambda: not self.order or self.order[0] == me, timeout):
                raise TimeoutError(f"{me} never got its turn")

    def done(self):
        with self.cond:
            self.order.pop(0)
            self.cond.notify_all()


def _run_threads(targets):
    """Run each target in its own thread; re-raise the first exception one of them raised."""
    errors = []

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # handed to the test thread
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


def test_steps_from_two_threads_are_numbered_once_each_and_in_order():
    steps = 20
    model = _model()
    barrier = threading.Barrier(2)
    with memleak.track(model, level="full") as tracker:

        def worker(seed):
            m = _model(seed)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for _ in range(steps):
                _train_step(m, opt)
                with torch.no_grad():
                    model(torch.randn(4, 16))
                barrier.wait(30)  # both end their step at the same moment
                tracker.step()

        _run_threads([lambda: worker(1), lambda: worker(2)])
    run = tracker.run()
    assert list(run.steps["step"]) == list(range(2 * steps))
    assert run.steps["time"].is_monotonic_increasing


def test_modes_and_hooks_are_removed_in_every_thread_that_ended_a_step():
    """Steps begin in one worker and end in the other (A, B, A, B, ...); after the block exits, while
    both workers still live, neither of them nor the thread that entered has anything installed."""
    rounds = 8
    model = _model()
    turns = Turns(["a", "b"] * rounds)
    exited = threading.Event()
    seen = {}

    def worker(name, seed):
        m = _model(seed)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(rounds):
            turns.wait(name)
            try:
                _train_step(m, opt)
                model(torch.randn(4, 16)).sum().backward()
                tracker.step()
            finally:
                turns.done()
        assert exited.wait(30)
        seen[name] = _installed()

    with memleak.track(model, level="full") as tracker:
        threads = [threading.Thread(target=worker, args=(n, s)) for n, s in (("a", 1), ("b", 2))]
        for t in threads:
            t.start()
        turns.wait("end")  # every turn taken
    exited.set()
    for t in threads:
        t.join(60)
    seen["entered"] = _installed()
    assert seen == {"a": NOTHING, "b": NOTHING, "entered": NOTHING}
    assert list(tracker.run().steps["step"]) == list(range(2 * rounds))


def test_a_step_begun_in_the_entering_thread_and_ended_in_another_leaves_nothing():
    """The entering thread trains (deep steps begin there, with their mode and hooks on), a
    worker ends every other step; at exit the entering thread has nothing left installed."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memleak.track(model, level="full") as tracker:
        for _ in range(6):
            _train_step(model, opt)
            tracker.step()  # begins the next (deep) step here
            _train_step(model, opt)
            _run_threads([tracker.step])  # ...which ends in the worker
    assert _installed() == NOTHING
    assert list(tracker.run().steps["step"]) == list(range(12))


def test_a_tracker_closed_in_another_thread_leaves_only_an_inert_mode_that_memleak_sweeps():
    """Started in thread A, closed in thread B while A is inside a deep step (its mode and hooks on):
    A keeps, until memleak next runs there, a mode that tags nothing and holds nothing of the run;
    the next tracker in A takes it off."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ready, closed = threading.Event(), threading.Event()
    seen = {}

    def thread_a():
        tracker = memleak.track(model, optimizer=opt, level="full").start()
        seen["tracker"] = weakref.ref(tracker)
        probe = next(p for p in tracker._probes if p.name == "tensors")
        seen["probe"] = weakref.ref(probe)
        del probe
        for _ in range(12):  # optimizer.step() ends each step, until the next one is a deep one
            _train_step(model, opt)
            if torch._C._len_torch_function_stack():
                break
        seen["on at close"] = _installed() != NOTHING
        ready.set()
        assert closed.wait(30)
        del tracker
        gc.collect()
        seen["run kept"] = [seen["tracker"]() is not None, seen["probe"]() is not None]
        x = torch.randn(4, 16)
        seen["same result"] = torch.equal(model(x), model[2](model[1](model[0](x))))
        with memleak.track(model, level="full") as again:
            again.step()
        seen["after the next tracker"] = _installed()

    def thread_b():
        assert ready.wait(30)
        tracker = seen["tracker"]()
        tracker.close()
        del tracker
        closed.set()

    _run_threads([thread_a, thread_b])
    assert seen["on at close"]
    assert seen["run kept"] == [False, False]
    assert seen["same result"]
    assert seen["after the next tracker"] == NOTHING


def test_an_on_leak_that_closes_the_tracker_leaves_nothing_installed():
    """on_leak may close its tracker: the step being ended must not begin another (deep) one."""
    kept = []

    def on_leak(growth):
        for probe in tracker._probes:
            probe.next_deep = 0  # the step after this one is a deep one: beginning it installs the mode
        tracker.close()

    with memleak.track(_model(), level="full", budget="2 GiB", on_leak=on_leak) as tracker:
        for _ in range(200):
            x = torch.randn(256, 256)
            kept.append((x @ x).relu())
            if not tracker.active:
                break
            tracker.step()
        assert tracker.leak_confirmed
        assert _installed() == NOTHING


def test_closed_watched_functions_are_not_kept_alive():
    trackers, models = [], []
    for _ in range(50):
        model = nn.Linear(4, 4)

        @memleak.watch(model, level="modules")
        def step(x, model=model):
            return model(x).sum()

        step(torch.randn(2, 4))
        step.tracker.close()
        trackers.append(weakref.ref(step.tracker))
        models.append(weakref.ref(model))
        del step, model
    gc.collect()
    assert sum(r() is not None for r in trackers) == 0
    assert sum(r() is not None for r in models) == 0


@pytest.mark.xdist_group("transformers")  # with the other tests that import it (helpers.needs)
def test_the_hugging_face_callback_is_not_kept_alive_after_its_fit(tmp_path):
    pytest.importorskip("transformers")
    from memleak.integrations.huggingface import MemleakCallback

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    callback = MemleakCallback(out=tmp_path, level="counters", print_report=False)
    args = SimpleNamespace(output_dir=str(tmp_path))
    callback.on_train_begin(args, SimpleNamespace(is_world_process_zero=True), None, model=model, optimizer=opt)
    callback.on_train_end(args, None, None)
    refs = [weakref.ref(callback), weakref.ref(model)]
    del callback, model, opt
    gc.collect()
    assert [r() for r in refs] == [None, None]


def _leak_messages(caplog):
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "memleak" and "possible leak" in r.getMessage()
    ]


def test_a_tracker_started_inside_another_warns_once_naming_the_outer_one(caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="memleak")
    with memleak.track(out=tmp_path / "outer", level="counters") as outer:
        with memleak.track(level="counters") as inner:
            outer.step()
            inner.step()
        with memleak.track(level="counters"):  # one warning per tracker started inside another
            pass
    with memleak.track(level="counters"):  # none once the outer one closed
        pass
    nested = [r.getMessage() for r in caplog.records if "already running" in r.getMessage()]
    assert len(nested) == 2, nested
    assert str(tmp_path / "outer") in nested[0] and "level=counters" in nested[0]
    # threads of their own are not nested
    with memleak.track(level="counters"):
        _run_threads([lambda: memleak.track(level="counters").start().close()])
    assert len([r for r in caplog.records if "already running" in r.getMessage()]) == 2


def test_a_leak_seen_by_nested_trackers_is_warned_about_once(caplog):
    gc.collect()  # garbage other tests left would be given back mid-run by the live check's collection
    caplog.set_level(logging.INFO, logger="memleak")
    calls = {"outer": [], "inner": []}
    kept = []
    with memleak.track(level="counters", budget="2 GiB", on_leak=calls["outer"].append) as outer:
        with memleak.track(level="counters", budget="2 GiB", on_leak=calls["inner"].append) as inner:
            for _ in range(200):
                x = torch.randn(256, 256)
                kept.append((x @ x).relu())
                outer.step()
                inner.step()
    assert outer.leak_confirmed and inner.leak_confirmed
    messages = _leak_messages(caplog)
    assert [level for level, _ in messages].count(logging.WARNING) == 1, messages
    assert [level for level, _ in messages].count(logging.INFO) == 1, messages
    # each tracker records it, and calls its own on_leak
    for t in (outer, inner):
        assert len([e for e in t.run().events if e.get("event") == "leak_confirmed"]) == 1
    assert [len(c) for c in calls.values()] == [1, 1]
