"""memleak does not change which warnings the user's loop shows: its live check and detectors run
pandas mid-run, whose `warnings.catch_warnings` made Python forget which warnings it had shown
(tracked, a warning issued at one line each step was shown once per check, not once)."""
import sys
import types
import warnings

import pytest
import torch
from torch import nn

import memleak
from memleak.recorder import warning_state


def _loop(tracker, steps: int) -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters())
    kept = []
    for _ in range(steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(torch.randn(64, 64))  # 16 KiB a step: the live check looks, with pandas
        warnings.warn("memleak-test: the same warning at the same line each step", UserWarning)
        if tracker is not None:
            tracker.step()


def _shown(level: str | None) -> int:
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("default")  # Python's own: once per line
        if level is None:
            _loop(None, 100)
        else:
            with memleak.track(level=level) as tracker:
                _loop(tracker, 100)
    return sum("memleak-test" in str(w.message) for w in log)


@pytest.mark.parametrize("level", ["counters", "auto"])
def test_a_warning_shown_once_untracked_is_shown_once_tracked(level):
    assert _shown(None) == 1
    assert _shown(level) == 1


def _shown_again(body) -> bool:
    """Whether a warning shown once at a line is shown again there after `body` ran inside `kept`."""
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("default")
        for i in range(2):
            warnings.warn("memleak-test: once", UserWarning)
            if i == 0:
                with warning_state.kept():
                    body()
    return len(log) == 2


def test_filters_put_back_or_only_ignoring_are_not_a_change():
    def catches():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

    assert not _shown_again(catches)
    assert not _shown_again(lambda: warnings.filterwarnings("ignore", message="something else"))


def test_a_filter_for_a_warning_class_imported_in_the_body_is_not_a_change():
    def imports():
        module = types.ModuleType("memleak_test_new_warnings")
        module.NewWarning = type("NewWarning", (UserWarning,), {"__module__": module.__name__})
        sys.modules[module.__name__] = module
        warnings.simplefilter("always", module.NewWarning)

    try:
        assert not _shown_again(imports)
    finally:
        sys.modules.pop("memleak_test_new_warnings", None)


def test_a_filter_that_stays_and_can_change_a_decision_is_counted():
    assert _shown_again(lambda: warnings.simplefilter("always", UserWarning))
    assert not _shown_again(lambda: None)
