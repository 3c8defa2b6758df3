"""A metric's list states, appended every step and reset at each epoch's end, over runs several
epochs long: bounded by the epoch, so no leak at either level (tests/scenarios/benign_metric_list_state_reset.py,
run longer than the corpus runs it)."""
from __future__ import annotations

import pytest

import memleak
from tests import scenarios


def _verdict(level: str, steps: int, epoch: int) -> str:
    mod = scenarios.load("benign_metric_list_state_reset")
    made = []

    def factory(model, **kw):
        made.append(memleak.track(model, level=level, **kw))
        return made[-1]

    mod.run(factory, steps=steps, epoch=epoch)
    return made[-1].report().verdict.value


@pytest.mark.parametrize(
    ("level", "epoch"),
    [("full", 25), ("auto", 50)],  # full: sampled across the cycles; auto: sampled in the first epoch only
)
def test_metric_states_reset_each_epoch_are_no_leak_over_200_steps(level, epoch):
    assert _verdict(level, 200, epoch) == "clean"
