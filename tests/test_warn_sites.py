"""A warning torch issues while memleak's creation-site mode is on is shown at the user's line, as
it is without memleak, and as often; the wrapper that moves it is gone once the tracker closes."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import memleak
from memleak.probes import warn_sites


def _warnings_of(body, steps=6, level="full"):
    """(filename, lineno, text) of each warning shown while `body(step)` runs in a tracked loop."""
    model = nn.Linear(4, 1)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with memleak.track(model, level=level) as tracker:
            for step in range(steps):
                body(model, step)
                tracker.step()
    return [(w.filename, w.lineno, str(w.message)) for w in shown]


def _line_of(marker: str) -> int:
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(n for n, line in enumerate(lines, 1) if marker in line and "_line_of" not in line)


def test_python_warning_inside_a_torch_function_is_the_callers():
    def body(model, step):
        F.mse_loss(model(torch.randn(8, 4)), torch.randn(8))  # mse-call

    shown = [w for w in _warnings_of(body) if "target size" in w[2]]
    assert len(shown) == 6  # every step, "always": none lost, none doubled
    assert {(w[0], w[1]) for w in shown} == {(__file__, _line_of("# mse-call"))}


def test_warning_from_a_c_function_is_the_callers():
    def body(model, step):
        t = model(torch.randn(2, 4))
        torch.tensor(t)  # copy-construct

    shown = [w for w in _warnings_of(body) if "copy construct" in w[2]]
    assert len(shown) == 6
    assert {(w[0], w[1]) for w in shown} == {(__file__, _line_of("# copy-construct"))}


@pytest.mark.parametrize("action", ["default", "once"])
def test_filters_show_as_often_as_without_memleak(action):
    """ "default": once per line of the user's; "once": once in all."""

    def body(model, step):
        x = torch.randn(3, 5)
        F.softmax(x)  # first-softmax
        F.softmax(x)  # second-softmax

    model = nn.Linear(4, 1)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter(action)
        with memleak.track(model, level="full") as tracker:
            for step in range(4):
                body(model, step)
                tracker.step()
    sites = sorted(w.lineno for w in shown if "softmax" in str(w.message))
    both = [_line_of("# first-softmax"), _line_of("# second-softmax")]
    assert sites == (both if action == "default" else both[:1])


def test_the_wrapper_is_removed_on_close_also_when_the_loop_raises():
    original = warnings._showwarnmsg
    model = nn.Linear(4, 1)
    try:
        with memleak.track(model, level="full") as tracker:
            on = []
            for _ in range(3):
                model(torch.randn(2, 4))
                on.append(warnings._showwarnmsg is not original)
                tracker.step()
            assert any(on)  # on while a deep step's mode is
            raise KeyError("boom")
    except KeyError:
        pass
    assert warnings._showwarnmsg is original
    assert warn_sites._installed == 0


def test_other_warnings_pass_through_untouched():
    def body(model, step):
        warnings.warn("the user's own", UserWarning, stacklevel=1)  # own-warning

    shown = [w for w in _warnings_of(body) if w[2] == "the user's own"]
    assert {(w[0], w[1]) for w in shown} == {(__file__, _line_of("# own-warning"))}
    assert len(shown) == 6
