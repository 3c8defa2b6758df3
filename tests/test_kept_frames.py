"""Frames kept as objects (``inspect.stack()``'s records, ``sys._getframe()``) keep every local
they had: the walk counts those locals under what keeps the frame, and the gc-referrer climb
names that holder, not the frame's variable; a traceback's frame is still named by its local."""
from __future__ import annotations

import inspect
import sys
import weakref

import torch

from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages
from memleak.probes.referrers import name_by_referrers


def _step_that_records(records):
    out = torch.ones(256) * 2  # noqa: F841 (kept by the frame the record holds)
    records.append(inspect.stack(context=0)[0])


def test_frame_records_in_a_list_count_their_frames_locals_under_the_list():
    call_sites = []
    for _ in range(3):
        _step_that_records(call_sites)
    st = walk_roots(step=3, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[sys._getframe()]).holders[
        "call_sites"
    ]
    assert st.count == 3 and st.nbytes == 3 * 256 * 4


class _Sites:
    def __init__(self):
        self.call_sites = []


def test_the_referrer_climb_names_what_keeps_a_frame():
    sites = _Sites()
    _step_that_records(sites.call_sites)
    ref = weakref.ref(sites.call_sites[0].frame.f_locals["out"])
    assert name_by_referrers(ref) == "_Sites.call_sites"  # what the user stores into, not the frame's local
    sites.call_sites.clear()


def _fails():
    act = torch.ones(8) * 3  # noqa: F841 (kept by the traceback)
    raise ValueError("spike")


def test_a_frame_only_a_traceback_keeps_is_named_by_its_local():
    try:
        _fails()
    except ValueError as e:
        tb = e.__traceback__
    ref = weakref.ref(tb.tb_next.tb_frame.f_locals["act"])
    assert name_by_referrers(ref) == "act (local of _fails, a frame kept by a traceback)"
    del tb


def _auc(logits):
    probs = logits.sigmoid()  # noqa: F841 (kept, with its graph, by the traceback)
    raise ValueError("Only one class present in y_true")


def test_caught_exceptions_kept_with_their_graphs_are_told_to_keep_the_message():
    # kept tensors with graphs once got the retained-graph fix (no_grad, detach): the cause is the
    # exception kept, whose traceback keeps the frame's locals
    import memleak
    from torch import nn

    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    errors = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            logits = model(torch.randn(32, 64))
            opt.zero_grad()
            logits.pow(2).mean().backward()
            opt.step()
            try:
                _auc(logits)
            except ValueError as e:
                errors.append(e)
    top = tracker.report().suspects[0]
    assert top.location == "errors", str(tracker.report())
    assert "keep `str(e)` or `repr(e)` instead of the exception" in top.fix, top.fix
