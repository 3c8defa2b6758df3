"""Models no root reaches, kept from outside Python's view (a callback C++ or the interpreter holds),
are named by the outermost object that keeps them (probes/outside_held.py)."""
from __future__ import annotations

import atexit
import gc

import pytest
import torch
from torch import nn

import memleak
from memleak.probes import outside_held
from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages, excluded_ids


class _Trial:
    def __init__(self):
        self.model = nn.Linear(256, 256)  # 257 KiB: a scan climbs past MIN_BYTES of unreached parameters

    def close(self):
        pass


def _param_of_trial_kept_by_atexit():
    trial = _Trial()
    atexit.register(trial.close)  # atexit's list is C: no referrer the collector sees
    return trial


def test_the_outermost_object_only_c_code_refers_to_is_found():
    trial = _param_of_trial_kept_by_atexit()
    param = trial.model.weight
    del trial
    try:
        top = outside_held._outermost(param, set(), set())
        assert outside_held._name(top) == "_Trial.close", top
    finally:
        atexit.unregister(top.__self__.close)


def test_a_reference_cycle_the_collector_will_free_and_a_module_global_are_not_outside():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    a.model = nn.Linear(4, 4)
    param = a.model.weight
    del a, b
    assert outside_held._outermost(param, set(), set()) is None  # only the cycle refers to it
    gc.collect()
    global _KEPT
    _KEPT = nn.Linear(4, 4)
    try:
        assert outside_held._outermost(_KEPT.weight, set(), set()) is None  # a module's global: a root
    finally:
        del _KEPT


def _walk(step, outside):
    model = nn.Linear(2, 2)
    exclude, _ = excluded_ids(model, None)  # the run's own
    return walk_roots(step=step, model=model, optimizer=None, ages=Ages(), exclude=exclude, frames=[],
                      outside=outside)


def test_a_scan_notes_what_is_unreached_first_then_follows_new_holders():
    outside = outside_held.OutsideHeld()
    outside.growing = True
    old = _param_of_trial_kept_by_atexit()  # unreached before the first scan: another loop's leftover
    ids = [id(old)]
    del old
    try:
        _walk(1, outside)
        assert outside.followed == []
        kept = [_param_of_trial_kept_by_atexit() for _ in range(3)]
        ids += [id(t) for t in kept]
        del kept
        w = _walk(5, outside)
        assert [name for name, _ in outside.followed] and all(n == "_Trial.close" for n, _ in outside.followed)
        assert all(id(ref().__self__) != ids[0] for _, ref in outside.followed)
        assert w.holders["_Trial.close"].count >= 2 and w.holders["_Trial.close"].kind == "outside"
        assert not any(h.startswith("_Trial.close.") for h in w.holders)  # its parts are one holder
    finally:
        for t in gc.get_objects():
            if type(t) is _Trial:
                atexit.unregister(t.close)


def test_no_scan_while_memory_is_flat_and_nothing_was_found():
    outside = outside_held.OutsideHeld()
    assert not outside.scan_due(10)
    outside.growing = True
    assert outside.scan_due(10)


@pytest.mark.parametrize("level", ["full"])
def test_models_kept_by_atexit_callbacks_in_a_tracked_loop_are_named_at_the_callbacks(level):
    model = nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with memleak.track(model, optimizer=opt, level=level) as tracker:
            for step in range(40):
                model(torch.randn(8, 32)).sum().backward()
                opt.step()
                if step % 4 == 0:
                    t = _param_of_trial_kept_by_atexit()
                    t.model.weight.data.normal_()
                    del t
                tracker.step()
    finally:
        for t in gc.get_objects():
            if type(t) is _Trial:
                atexit.unregister(t.close)
    top = tracker.report().suspects[0]
    assert top.location == "atexit callbacks", str(tracker.report())
