"""Leaks that grow every few steps (the loss kept with its graph at each log interval): the growth
screen sees their staircase, the sampled-trend rule counts it, and level auto names the holder as
level full does, with one last holders sample at the end while the loop's frame is alive."""

from __future__ import annotations

from array import array

import numpy as np
import torch
from torch import nn

import memleak
from memleak.recorder import escalation
from tests.scenarios._common import MLP, batch, seed

MIB = 2**20


def _stairs(every: int, n: int = escalation.SCREEN_ROWS, step_bytes: float = 256 * 1024) -> np.ndarray:
    rng = np.random.default_rng(1)
    jitter = rng.integers(0, 3, n) * 16.0  # tens of bytes either way: a heap's noise
    return 150 * MIB + step_bytes * (np.arange(n) // every) + jitter


def test_the_screen_sees_a_staircase_that_rises_on_few_steps():
    min_rel = escalation.min_rel_growth("heap_bytes")
    y = _stairs(10)
    assert (np.diff(y) > 0).mean() < escalation.SCREEN_MIN_RISING  # the old rule saw nothing
    assert escalation.rising(y, min_rel)
    series = {"step": array("d", range(len(y))), "heap_bytes": array("d", y)}
    assert escalation.screen(series)


def test_the_screen_opens_nothing_for_a_jump_a_fill_or_a_sawtooth():
    min_rel = escalation.min_rel_growth("heap_bytes")
    n = escalation.SCREEN_ROWS
    jump = 150 * MIB + 2 * MIB * (np.arange(n) >= 20)  # one allocation that stays (a warm-up)
    assert not escalation.rising(jump, min_rel)
    filled = 150 * MIB + 256 * 1024 * np.minimum(np.arange(n) // 5, 6)  # full by step 30
    assert not escalation.rising(filled, min_rel)
    saw = 150 * MIB + 256 * 1024 * ((np.arange(n) % 20) // 5)  # emptied every 20 steps
    assert not escalation.rising(saw, min_rel)
    small = _stairs(10, step_bytes=1024)  # far below the growth the detector reports
    assert not escalation.rising(small, min_rel)


def _logged_every(every: int, steps: int, level: str = "auto"):
    g = seed(64)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logged = []
    with memleak.track(model, optimizer=opt, out=None, level=level) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % every == 0:
                logged.append(loss)  # the leak: the loss, with its graph, every log interval
            tracker.step()
    return tracker.report()


def test_a_loss_logged_every_five_steps_is_named_at_auto():
    report = _logged_every(5, 60)
    assert report.verdict.value == "leak", str(report)
    top = report.suspects[0]
    assert (top.kind.value, top.location) == ("retained_graph", "logged"), str(report)
    # the last holders sample was taken when the `with` block ended: the loop's frame was alive
    assert report.run.holders[-1].step == 59


def _loop(tracker, model, opt, kept, steps):
    g = seed(3)
    for _ in range(steps):
        x, y = batch(g, n=16)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(loss.detach())
        tracker.step()


def test_no_last_holders_sample_once_the_loops_frame_is_gone():
    """The tracker closed after the function that ran the loop returned (a framework's end-of-fit
    callback): the walk would no longer reach the loop's variables, so no holders record."""
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tracker = memleak.track(model, optimizer=opt, out=None)
    tracker.start()
    _loop(tracker, model, opt, [], 40)
    tracker.close()
    assert max(r.step for r in tracker.report().run.holders) < 39


def test_a_warm_up_jump_then_a_creep_opens_nothing_but_a_leak_after_a_jump_does():
    """A loop whose tracking starts before its first step: the C heap jumps once (the optimizer's
    state, a new thread's arena) and then creeps by a few hundred bytes on most steps. The jump
    makes the rise, the creep makes tau: neither alone is growth. The same jump followed by a
    leak of 16 KiB a step is."""
    min_rel = escalation.min_rel_growth("heap_bytes")
    rng = np.random.default_rng(2)
    n = escalation.SCREEN_ROWS
    jump = 140 * MIB + 990_000.0 * (np.arange(n) >= 1)
    creep = jump + np.cumsum(rng.choice([-64.0, 600.0, 1500.0], n, p=[0.3, 0.5, 0.2]))
    assert (np.diff(creep) > 0).mean() > escalation.SCREEN_MIN_RISING
    assert not escalation.rising(creep, min_rel)
    assert not escalation.rising(creep[:12], min_rel)  # in the young steps too
    assert escalation.rising(creep + 16384.0 * np.arange(n), min_rel)
    series = {"step": array("d", range(n)), "heap_bytes": array("d", creep)}
    assert not escalation.screen(series)
