"""Another running thread's frames are never read: on Python 3.11 reading a running thread's
frames (`sys._current_frames`, ``f_back``) can crash the process, and a profiler must never crash
the run it watches. What a thread keeps through its arguments or its own object is still named
(test_culprits_general.py); a container only a thread's running function holds is named from
that function's code."""
from __future__ import annotations

import sys
import threading
import weakref

import pytest
import torch

from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages
from memleak.probes.referrers import name_by_referrers
from memleak.probes.stores import filled_locals


def _keeps_three(ready, go):
    kept = [torch.ones(16) for _ in range(3)]
    ready.set()
    go.wait(10)
    return kept


def test_the_walk_reads_no_other_threads_frames(monkeypatch):
    calls = []
    real = sys._current_frames

    def spy():
        calls.append(1)
        return real()

    monkeypatch.setattr(sys, "_current_frames", spy)
    ready, go = threading.Event(), threading.Event()
    thread = threading.Thread(target=_keeps_three, args=(ready, go), daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        walk = walk_roots(step=3, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[sys._getframe()])
    finally:
        go.set()
        thread.join(10)
    assert calls == []
    assert "kept" not in walk.holders


def test_a_generator_running_in_another_thread_is_not_read(monkeypatch):
    import types

    ready, go = threading.Event(), threading.Event()

    def produce():
        inside = [torch.ones(16) for _ in range(3)]
        ready.set()
        go.wait(10)  # running, in the other thread, while the walk looks
        yield inside

    gen = produce()
    mod = types.ModuleType("__main__")
    mod.gen = gen
    monkeypatch.setitem(sys.modules, "__main__", mod)
    thread = threading.Thread(target=next, args=(gen,), daemon=True)
    thread.start()
    try:
        assert ready.wait(10) and gen.gi_running
        walk = walk_roots(step=3, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[sys._getframe()])
    finally:
        go.set()
        thread.join(10)
    assert not any("inside" in h for h in walk.holders)


def _in_thread(body):
    """Run `body(ready, go, refs)` in a thread until it has something to look at; the weak
    references it leaves in `refs`, and the event that lets it return."""
    ready, go, refs = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=body, args=(ready, go, refs), daemon=True)
    thread.start()
    assert ready.wait(10)
    return thread, go, refs


def _named_in_thread(body):
    """The name gc referrers give the first tensor `body` (run as in `_in_thread`) left in `refs`,
    while the thread still runs; and the thread."""
    thread, go, refs = _in_thread(body)
    try:
        return name_by_referrers(refs[0]), thread
    finally:
        go.set()
        thread.join(10)


def test_a_list_only_another_threads_function_keeps_is_named_from_that_functions_code():
    def collect(ready, go, refs):
        outputs = []
        for _ in range(3):
            outputs.append(torch.ones(4))
        refs.append(weakref.ref(outputs[0]))
        ready.set()
        go.wait(10)

    name, thread = _named_in_thread(collect)
    assert name == f"outputs (local of collect() in thread {thread.name!r})"


def test_two_candidate_locals_of_the_containers_type_are_both_named_one_of_another_type_does_not_count():
    def collect(ready, go, refs):
        outputs, others, by_step = [], [], {}
        outputs.append(torch.ones(4))
        others.append(ready)  # of a type its code does not say: a candidate
        by_step[0] = torch.ones(4)
        refs.append(weakref.ref(outputs[0]))
        refs.append(weakref.ref(by_step[0]))
        ready.set()
        go.wait(10)

    thread, go, refs = _in_thread(collect)
    try:
        in_list, in_dict = name_by_referrers(refs[0]), name_by_referrers(refs[1])
    finally:
        go.set()
        thread.join(10)
    # outputs or others: the code does not tell which keeps the tensors, so both are named (by name)
    assert in_list == f"others or outputs (local of collect() in thread {thread.name!r})"
    assert in_dict == f"by_step (local of collect() in thread {thread.name!r})"


def test_candidate_locals_in_two_threads_functions_name_none():
    def collect(ready, go, refs):
        outputs = []
        outputs.append(torch.ones(4))
        refs.append(weakref.ref(outputs[0]))
        ready.set()
        go.wait(10)

    def gather(ready, go, refs):
        gathered, n = [], 1
        gathered.append(n)
        ready.set()
        go.wait(10)

    first, go1, refs = _in_thread(collect)
    second, go2, _ = _in_thread(gather)
    try:
        name = name_by_referrers(refs[0])
    finally:
        go1.set(), go2.set()
        first.join(10), second.join(10)
    assert name == ""  # a local of collect() or of gather(): two functions, two threads


def test_the_fix_for_locals_named_together_says_one_of_them():
    from memleak.detect.culprit_fixes import _container_fix

    fix = _container_fix("outputs or others (local of collect() in thread 'T')", "local", "")
    assert fix.startswith("One of `outputs`, `others`, local variables of collect() running in another thread")


def test_filled_locals_are_the_ones_that_start_empty_and_are_stored_into():
    def fn(x):
        kept = []
        table = {}
        unused = []
        given = [x]
        for i in range(3):
            kept.append(i)
            table[i] = i
            given.append(i)
        return kept, table, unused, given

    assert filled_locals(fn.__code__) == [("kept", "list"), ("table", "dict")]


def test_locals_stored_only_plain_values_into_are_no_candidates_for_a_tensors_container(tmp_path):
    def fn(x, e):
        errors, losses, names, halves, by_key, mixed = [], [], [], [], {}, []
        errors.append(repr(e))  # strings
        losses.append(x.item())  # numbers read out
        names.append(f"step {x}")
        halves.append(x.float())  # a tensor's method: a tensor
        by_key["k"] = str(x)
        mixed.append(1)
        mixed.append(x)  # one store of unknown type: a candidate
        return errors, losses, names, halves, by_key, mixed

    assert filled_locals(fn.__code__) == [("halves", "list"), ("mixed", "list")]


def stream_helper(ready, go, refs):
    outputs = []
    outputs.append(torch.ones(4))
    refs.append(weakref.ref(outputs[0]))
    ready.set()
    go.wait(10)


def stream_worker(ready, go, refs):
    errors = []
    try:
        stream_helper(ready, go, refs)
    except Exception as e:
        errors.append(repr(e))  # strings only: no candidate for a container of tensors


def test_a_helpers_list_is_named_beside_the_targets_list_of_error_strings():
    name, thread = _named_in_thread(stream_worker)
    assert name == f"outputs (local of stream_helper() in thread {thread.name!r})"


def test_a_threads_list_emptied_every_few_steps_is_a_reset_not_a_leak():
    """Its tensors die all at once, as a reference cycle's do when the collector runs; but a local
    named from the thread's code is a container the thread empties, not a cycle."""
    import queue

    import memleak

    inbox: queue.Queue = queue.Queue()
    done = threading.Event()

    def epoch_worker():
        epoch_outputs = []
        while (item := inbox.get()) is not None:
            epoch_outputs.append(item)
            if len(epoch_outputs) == 10:
                epoch_outputs.clear()
            done.set()

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    thread = threading.Thread(target=epoch_worker, daemon=True)
    thread.start()
    try:
        with memleak.track(model, level="full") as t:
            for _ in range(60):
                out = model(torch.randn(32, 64))
                done.clear()
                inbox.put(out.detach().clone())
                assert done.wait(10)  # the thread has it before the step ends
                t.step()
    finally:
        inbox.put(None)
        thread.join(10)
    assert t.report().verdict.value != "leak", str(t.report())


def gather(ready, go, refs):
    kept: list[torch.Tensor] = []  # annotated
    kept.append(torch.ones(4))
    refs.append(weakref.ref(kept[0]))
    ready.set()
    go.wait(10)


def eval_thread(ready, go, refs):
    gather(ready, go, refs)  # the thread's target hands its work to a function of the user's


def test_a_list_of_a_function_the_threads_target_calls_is_named_after_that_function():
    name, thread = _named_in_thread(eval_thread)
    assert name == f"kept (local of gather() in thread {thread.name!r})"


def timing_worker(ready, stop):
    step_times = []
    step_times.append(1.0)  # floats only: not what holds the tensors
    ready.set()
    stop.wait(10)


def drain(ready, go, refs):
    kept = []
    kept.append(torch.ones(4))
    refs.append(weakref.ref(kept[0]))
    ready.set()
    go.wait(10)


def test_a_leak_in_a_lambda_targets_function_is_not_pinned_on_another_threads_list():
    timer_ready, stop = threading.Event(), threading.Event()
    other = threading.Thread(target=timing_worker, args=(timer_ready, stop), daemon=True)
    other.start()
    assert timer_ready.wait(10)
    ready, go, refs = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=lambda: drain(ready, go, refs), daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        name = name_by_referrers(refs[0])
    finally:
        go.set()
        stop.set()
        thread.join(10)
        other.join(10)
    # timing_worker()'s step_times is given floats only: drain()'s kept is the one candidate
    assert name == f"kept (local of drain() in thread {thread.name!r})"


def test_the_fixes_say_where_a_thread_keeps_tensors_and_that_its_frames_are_not_read():
    from memleak.detect.culprit_fixes import culprit_fix
    from memleak.holder_names import thread_local_name
    from memleak.schema import Kind

    named = thread_local_name("predictions", "metrics_worker", "Thread-1")
    fix = culprit_fix(Kind.SURVIVING_TENSORS, named, "referrer", False, False, False)
    assert fix.startswith("`predictions`, a local variable of metrics_worker() running in another thread")
    unnamed = culprit_fix(Kind.SURVIVING_TENSORS, "", "unreachable", False, False, False)
    assert "a local variable of a function another thread runs" in unnamed


def test_a_coroutine_on_an_event_loop_in_another_thread_is_named_by_its_own_local():
    # A suspended coroutine is read (it is not running); reached through the concurrent future's
    # done callbacks and the task, its local was once named `agg._done_callbacks`, a list's fix.
    import asyncio

    import memleak
    from torch import nn

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    inbox = asyncio.run_coroutine_threadsafe(_make_queue(), loop).result(10)
    agg = asyncio.run_coroutine_threadsafe(aggregator(inbox), loop)
    model = nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with memleak.track(model, optimizer=opt, level="full") as tracker:
            for _ in range(40):
                out = model(torch.randn(32, 64))
                opt.zero_grad()
                out.pow(2).mean().backward()
                opt.step()
                loop.call_soon_threadsafe(inbox.put_nowait, out.detach())
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(10)  # the item is taken
    finally:
        agg.cancel()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    top = tracker.report().suspects[0]
    assert top.location == "window (local of coroutine aggregator)", str(tracker.report())


async def _make_queue():
    import asyncio

    return asyncio.Queue()


async def aggregator(inbox):
    window = []
    while True:
        window.append(await inbox.get())




def prefetcher(out, stop):
    """Makes batches and, a debugging aid left in, keeps each in a local list."""
    import queue

    made = []
    while not stop.is_set():
        x = torch.randn(64, 256)
        made.append(x)
        try:
            out.put(x, timeout=0.1)
        except queue.Full:
            made.pop()


def pair_prefetcher(out, stop):
    """The same, keeping each (inputs, targets) pair it made: the tensors sit in tuples."""
    import queue

    made = []
    while not stop.is_set():
        x = torch.randn(64, 256)
        made.append((x, torch.zeros(64)))
        try:
            out.put(x, timeout=0.1)
        except queue.Full:
            made.pop()


def bounded_prefetcher(out, stop):
    """The same, keeping the last four batches only."""
    import collections
    import queue

    made = collections.deque(maxlen=4)
    while not stop.is_set():
        x = torch.randn(64, 256)
        made.append(x)
        try:
            out.put(x, timeout=0.1)
        except queue.Full:
            pass


def _prefetching(target, level: str, steps: int = 50):
    """A loop fed by a thread running `target` (made there, its container is held by its running
    frame only)."""
    import queue

    from torch import nn

    import memleak

    q, stop = queue.Queue(maxsize=2), threading.Event()
    thread = threading.Thread(target=target, args=(q, stop), daemon=True)
    thread.start()
    model = nn.Linear(256, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with memleak.track(model, optimizer=opt, level=level) as tracker:
            for _ in range(steps):
                loss = model(q.get(timeout=10)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        stop.set()
        thread.join(10)
    return tracker.report(), thread


@pytest.mark.parametrize(("target", "level"), [(prefetcher, "auto"), (prefetcher, "full"), (pair_prefetcher, "auto")])
def test_a_list_another_thread_fills_with_what_it_makes_is_named(target, level):
    """Tensors made and kept by another thread are neither tagged (creation sites are tagged in
    the training thread) nor walked (its running frames are not read): a scan of the live tensors
    finds them unreached, and gc referrers and the thread function's code name their list."""
    report, thread = _prefetching(target, level)
    assert report.verdict.value == "leak", str(report)
    top = report.suspects[0]
    fn = target.__name__
    assert top.location == f"made (local of {fn}() in thread {thread.name!r})", str(report)
    assert f"a local variable of {fn}() running in another thread" in " ".join(top.fix.split())


def test_a_bounded_container_another_thread_fills_is_no_leak():
    report, _ = _prefetching(bounded_prefetcher, "full")
    # the bounded container is never blamed (the heap series alone can read as growth on a rare
    # run, as a second thread's malloc arena warms up: that verdict is not this scan's)
    assert not [s for s in report.suspects if "prefetcher" in s.location], str(report)
    assert not [s for s in report.suspects if s.leak and s.kind.value != "linear_growth"], str(report)


def test_live_tensors_are_listed_only_while_a_thread_of_the_users_runs(monkeypatch):
    from torch import nn

    import memleak
    from memleak.probes import thread_held

    assert not thread_held.user_thread_running()  # pytest's own threads, if any, are no user code
    listed = []
    real = thread_held.live_tensors
    monkeypatch.setattr(thread_held, "live_tensors", lambda: listed.append(1) or real())
    model = nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, level="full"):
        for _ in range(20):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    assert listed == []
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(10,), daemon=True)
    thread.start()
    try:
        assert not thread_held.user_thread_running()  # a library's function as the target
        user = threading.Thread(target=lambda: stop.wait(10), daemon=True)
        user.start()
        assert thread_held.user_thread_running()
    finally:
        stop.set()
        thread.join(10)
        user.join(10)


def test_a_scan_that_fails_stops_the_scans_not_the_walk(monkeypatch):
    from memleak.probes import thread_held

    def boom():
        raise RuntimeError("a strange object")

    monkeypatch.setattr(thread_held, "live_tensors", boom)
    report, _ = _prefetching(prefetcher, "full", steps=30)
    assert report.run.holders, "the walks went on"  # the tensor probe was not turned off
    assert not [e for e in report.run.events if e.get("event") == "probe_failed"]
