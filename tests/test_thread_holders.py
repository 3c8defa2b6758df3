"""What another running thread keeps in the locals of the user's functions (a background logger's
list, a pool worker's cache): named by variable, read without keeping anything alive, and not
read at all while a Python tracer (a debugger) runs in that thread."""
from __future__ import annotations

import gc
import sys
import threading
import weakref

import torch

from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages


def _walk():
    return walk_roots(step=3, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[sys._getframe(1)])


class _Background:
    """A thread running `body(ready, go)`: it sets `ready` when there is something to look at and
    waits on `go` before it returns."""

    def __init__(self, body):
        self.ready, self.go = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=body, args=(self.ready, self.go), daemon=True)

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        self.go.set()
        self.thread.join(10)


def _keeps_three(ready, go):
    kept = [torch.ones(16) for _ in range(3)]
    ready.set()
    go.wait(10)
    return kept


def test_a_list_in_another_threads_running_function_is_named_by_its_variable():
    with _Background(_keeps_three):
        walk = _walk()
    st = walk.holders["kept"]
    assert st.count == 3 and st.nbytes == 3 * 16 * 4
    assert "_keeps_three() in thread" in st.note


def test_reading_another_threads_locals_keeps_nothing_alive_after_the_thread_drops_it():
    seen: list = []
    dropped, finish = threading.Event(), threading.Event()

    def body(ready, go):
        t = torch.ones(1024)
        seen.append(weakref.ref(t))
        ready.set()
        go.wait(10)  # the walk reads this frame's locals meanwhile
        del t
        dropped.set()
        finish.wait(10)  # the frame still runs while the test looks

    bg = _Background(body)
    with bg:
        assert _walk().holders["t"].count == 1
        bg.go.set()
        assert dropped.wait(10)
        gc.collect()
        assert seen[0]() is None  # no f_locals snapshot of the walk's holds it
        finish.set()

def test_a_thread_under_a_python_tracer_is_not_read():
    def tracer(frame, event, arg):
        return tracer

    def body(ready, go):
        sys.settrace(tracer)  # as a debugger in that thread would
        traced = [torch.ones(8)]
        ready.set()
        go.wait(10)
        sys.settrace(None)
        return traced

    with _Background(body):
        walk = _walk()
    assert "traced" not in walk.holders


def test_no_other_thread_is_read_while_a_python_tracer_runs_in_this_one():
    previous = sys.gettrace()
    with _Background(_keeps_three):
        sys.settrace(lambda frame, event, arg: None)  # a debugger's trace function, here
        try:
            walk = _walk()
        finally:
            sys.settrace(previous)
    assert "kept" not in walk.holders


def test_reading_the_threads_leaves_no_reference_cycle_holding_the_walk():
    import gc

    gc.collect()
    gc.disable()  # only reference counting frees it: a cycle through the walk's frames would keep it
    try:
        with _Background(_keeps_three):
            walk = weakref.ref(_walk())
        assert walk() is None
    finally:
        gc.enable()


def test_no_collection_starts_while_the_walk_reads_another_threads_frames():
    """A collection then could let that thread return from a frame Python is making an object for
    (a use-after-free that crashes profilers reading threads on Python 3.11): the walk pauses the
    collector, and runs with it on again afterwards."""
    readers = {"running_frames", "thread_user_frames", "_add_thread_locals", "_add_threads"}
    caught: list[str] = []

    def on_collect(phase, info):
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_name in readers:
                caught.append(f.f_code.co_name)
            f = f.f_back

    old = gc.get_threshold()
    gc.callbacks.append(on_collect)
    gc.set_threshold(1)  # a collection at nearly every allocation
    try:
        with _Background(_keeps_three):
            walk = _walk()
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(on_collect)
    assert walk.holders["kept"].count == 3  # read all the same
    assert caught == []
    assert gc.isenabled()


def test_with_the_collector_running_the_threads_are_not_read():
    from memleak.probes.frames import running_frames

    with _Background(_keeps_three):
        assert gc.isenabled() and running_frames() == {}
        gc.disable()
        try:
            assert running_frames()  # the background thread's frame
        finally:
            gc.enable()
