"""A probe on a budget costs at most that share of the run, what it spends inside the steps and its
first run included (on a clock the test controls)."""

from __future__ import annotations

import weakref

import pytest
import torch

from memleak.probes import ProbeContext
from memleak.probes import census as census_module
from memleak.probes.census import CensusProbe
from memleak.probes.budget import young_gap
from memleak.probes.modules import MAX_GAP, MIN_GAP, ModuleProbe


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.mark.parametrize("budget", [0.05, 0.2])
def test_the_census_costs_its_budget_first_census_included(monkeypatch, budget):
    clock = FakeClock()
    censuses = []

    def census():  # one second a census
        clock.now += 1.0
        censuses.append(clock.now)
        return {"cpu": (0, 0)}

    monkeypatch.setattr(census_module, "take_census", census)
    monkeypatch.setattr(census_module, "time", clock)
    probe = CensusProbe()
    probe.start(ProbeContext(torch.device("cpu"), "full", options={"census_budget": budget}))
    step_time = 0.0
    for step in range(400):  # steps of a second
        clock.now += 1.0
        step_time += 1.0
        probe.sample(step, 1.0)
        spent = len(censuses)
        if step == 0:
            assert spent == 1  # the first step always has one
        elif spent > 1:  # once the run paid for the first, the budget holds
            assert spent <= budget * step_time + 1e-9
    assert len(censuses) >= int(budget * 400) - 1  # and the budget is used, not left idle


def test_a_module_detail_step_pays_for_the_hooks_inside_it_too():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    probe = ModuleProbe()
    ctx = ProbeContext(torch.device("cpu"), "full", weakref.ref(model), options={"modules_budget": 0.02})
    probe.start(ctx)
    try:
        for step in range(1, 40):
            probe.step_begin(step)
            model(torch.ones(2, 4))
            detail = probe.detail
            # plain steps take ten seconds; a detail step 1.9 s more (its hooks): long enough that
            # the record's own time (a few ms; 20 in a test worker with a fragmented heap) cannot
            # change the gap
            probe.sample(step, 11.9 if detail else 10.0)
            if detail and step > 1 and young_gap(step, 0.0) is None:  # past the young run's dense samples
                # 1.9 s (and the record's few ms) at 2 % of a 10 s step: one detail step in 10
                assert probe.next_detail - step == 10
                break
        else:
            pytest.fail("no detail step after the first")
    finally:
        probe.stop()
    assert MIN_GAP < 10 <= MAX_GAP
