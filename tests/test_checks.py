"""Level auto's checks: one deep step (tagging and the reference walk) at steps CHECK_RATIO apart
once the young steps ended (the first FIRST_CHECK_RATIO times their end), so that a holder gaining a tensor every few steps (too little for the
growth screen) or a leak that starts after a quiet start is counted at a few steps over the run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memleak
from memleak.recorder import escalation
from memleak.recorder.escalation import AutoLevel
from tests.scenarios._common import MLP, batch, seed
from tests.test_auto_level import _series
from tests.test_periodic_leaks import _logged_every


def test_checks_come_at_steps_check_ratio_apart_after_a_quiet_start():
    auto = AutoLevel()
    auto.begin()
    checks = []
    for step in range(400):
        auto.after(step, 0.01, 0.01 * (step + 1), _series([1e8] * (step + 1)), ())
        if auto.check_due:
            assert auto.check(step, (), turn_off=None) is None  # no probe saw anything: no window
            checks.append(step + 1)
    young = escalation.YOUNG_STEPS  # no probes: the young steps never end early
    assert checks[0] == int(escalation.FIRST_CHECK_RATIO * young)
    assert all(b == -(-escalation.CHECK_RATIO * a // 1) for a, b in zip(checks, checks[1:], strict=False))
    assert auto.checks == len(checks) and auto.windows == 0  # checks are no windows
    assert not auto.on  # a check turns no detail on: the walk runs at the end of a counters step


@pytest.mark.parametrize(("every", "steps"), [(10, 100), (20, 200)])
def test_a_loss_kept_every_ten_or_twenty_steps_is_named_at_auto(every, steps):
    """A loss kept with its graph every 10 (20) steps: ~7 KiB a rise, far under the growth screen;
    the young steps (step 0 keeps the first) end quiet at step 8."""
    report = _logged_every(every, steps)
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "logged", str(report)
    assert report.run.check_steps()


def _kept_from(start: int, steps: int) -> memleak.Report:
    g = seed(5)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    with memleak.track(model, optimizer=opt, out=None) as tracker:
        for step in range(steps):
            x, y = batch(g)
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= start:
                kept.append(out)  # the leak, from step `start` on: each output with its graph
            tracker.step()
    return tracker.report()


@pytest.mark.parametrize(("start", "steps"), [(10, 25), (20, 40)])
def test_a_leak_that_starts_after_a_quiet_start_in_a_short_run_is_named(start, steps):
    report = _kept_from(start, steps)
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "kept", str(report)


def test_a_probe_whose_check_fails_is_turned_off_and_the_others_still_check():
    class Failing(memleak.probes.Probe):
        name = "failing"

        def check(self, step):
            raise RuntimeError("boom")

    class Counting(memleak.probes.Probe):
        name = "counting"
        seen: list = []

        def check(self, step):
            self.seen.append(step)

    turned_off = []
    probes = [Failing(), Counting()]
    assert AutoLevel().check(40, probes, lambda p, e: turned_off.append((p.name, str(e)))) is None
    assert turned_off == [("failing", "boom")]
    assert probes[1].seen == [40]
