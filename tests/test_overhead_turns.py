"""benchmarks/overhead.py's loops in turns: each loop in a worker process of its own, one step per
turn; the tracked loop's tracker times its steps on a clock that stops while it waits."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import overhead  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    loops = (overhead.LoopProcess(torch.device("cpu"), None), overhead.LoopProcess(torch.device("cpu"), None))
    yield loops
    for loop in loops:
        loop.close()
    assert not any(loop.proc.is_alive() for loop in loops)


def test_turns_time_both_loops_and_the_tracker_sees_its_own_steps_only(pair):
    """The tracker's recorded step times are its own loop's steps: the other loop's step in between
    (as long again) is not in them, so its budgets are the shares they would be running alone."""
    tracked, untracked, durations = overhead.turns_block(pair, 12, "counters")
    assert tracked > 0 and untracked > 0
    assert len(durations) == 12
    own_step = untracked / 12  # the untracked loop's step: the same model and data
    assert statistics.median(durations) < 1.5 * own_step, (durations, own_step)


def test_an_untracked_pair_records_no_steps(pair):
    tracked, untracked, durations = overhead.turns_block(pair, 4, None)
    assert tracked > 0 and untracked > 0 and durations == []


def test_an_error_in_a_loops_process_reaches_the_parent(pair):
    with pytest.raises(RuntimeError, match="in the loop's process: UsageError"):
        overhead.turns_block(pair, 2, "no-such-level")
