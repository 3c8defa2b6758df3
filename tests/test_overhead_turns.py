"""benchmarks/overhead.py's loops in turns: the untracked loop runs one step per turn, in a thread
of its own, where memleak's per-thread modes and saved-tensor hooks never reach it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import memleak  # noqa: E402
import overhead  # noqa: E402
from memleak.probes.tagging import stacks_empty  # noqa: E402


def test_the_untracked_loop_runs_its_steps_in_order_one_per_turn():
    seen = []
    turns = overhead.Turns(seen.append)
    try:
        for i in range(5):
            assert len(seen) == i  # nothing runs until handed the turn
            turns.run_one()
            assert seen == list(range(i + 1))
    finally:
        turns.close()
    assert not turns.thread.is_alive()
    assert turns.seconds > 0


def test_an_error_in_the_untracked_step_reaches_the_main_thread():
    def step(i):
        raise ValueError(f"step {i}")

    turns = overhead.Turns(step)
    try:
        with pytest.raises(ValueError, match="step 0"):
            turns.run_one()
    finally:
        turns.close()


def test_memleaks_modes_in_the_tracked_loop_do_not_reach_the_untracked_one():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    bare_in_untracked, bare_in_tracked = [], []
    turns = overhead.Turns(lambda i: bare_in_untracked.append(stacks_empty()))
    tracker = memleak.track(model, optimizer=opt, level="full")
    try:
        with tracker:
            for _ in range(6):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
                bare_in_tracked.append(stacks_empty())  # inside the step: the tracked thread's mode is on
                turns.run_one()
                tracker.step()
    finally:
        turns.close()
    assert not all(bare_in_tracked)  # the check sees memleak's mode where it is on
    assert bare_in_untracked == [True] * 6


def test_turns_time_the_tracked_loop_whole_and_the_untracked_steps():
    pair = (overhead.make(torch.device("cpu"), d=16, layers=1), overhead.make(torch.device("cpu"), d=16, layers=1))
    tracked, untracked = overhead.turns_block(pair, torch.device("cpu"), 4, "counters", None)
    assert tracked > 0 and untracked > 0


def test_the_tracked_loops_clock_stops_while_it_waits_for_its_turn():
    """The tracker times its steps on the loop's own clock: the other loop's step in between
    (here 50 ms) is not in the step times its budgets are shares of."""
    import time

    from memleak.recorder import tracker as tracker_module

    other = overhead.Turns(lambda i: time.sleep(0.05))
    durations = []
    model, opt = overhead.make(torch.device("cpu"), d=16, layers=1)
    data = [torch.randint(0, 256, (2, 33)) for _ in range(2)]

    def step(i):
        overhead.train_step(model, opt, data[i % 2])
        t = tracker_module.time.perf_counter()
        durations.append(t)

    mine = overhead.Turns(step)
    clock = mine.clock()
    try:
        with overhead.patched(tracker_module, "time", type("T", (), {"perf_counter": staticmethod(clock)})):
            for _ in range(4):
                mine.run_one()
                other.run_one()
    finally:
        mine.close()
        other.close()
    gaps = [b - a for a, b in zip(durations, durations[1:])]
    assert max(gaps) < 0.04, gaps  # a step of the tiny model, not the other loop's 50 ms
    assert mine.waited >= 0.15
