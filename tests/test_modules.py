"""ModuleProbe: per-module memory attribution, categories, attribute scans, and clean removal."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import memleak
from memleak.probes.budget import YOUNG_DENSE, YOUNG_GAP
from memleak.probes.modules import MEASURE_EVERY, MIN_GAP
from memleak.report.series import module_table


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.small = nn.Linear(16, 16)
        self.wide = nn.Linear(16, 4096)
        self.out = nn.Linear(4096, 2)

    def forward(self, x):
        return self.out(torch.relu(self.wide(self.small(x))))


# what a measured step records, not whether it may be measured (that budget has its own test below)
pytestmark = pytest.mark.usefixtures("module_reads_affordable")


def _train(model, level="modules", steps=30, hook=None):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with memleak.track(model, optimizer=opt, level=level) as tracker:
        for _ in range(steps):
            loss = model(torch.randn(64, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    return tracker.run()


def test_modules_records_are_compact_and_complete():
    run = _train(Wide())
    recs = run.records["modules"]
    young = len(range(1, YOUNG_DENSE, YOUNG_GAP))  # a young run is sampled every other step
    assert 1 <= len(recs) <= young + (30 - YOUNG_DENSE) // MIN_GAP + 1
    last = recs[-1]
    cats = last["categories"]
    for key in ("parameter", "gradient", "optimizer_state", "buffer"):
        assert key in cats
    measured = [r for r in recs if r["counter"]]
    assert "activation" in measured[-1]["categories"]
    params = sum(p.numel() * 4 for p in Wide().parameters())
    assert cats["parameter"] == params
    assert cats["gradient"] == params
    assert cats["optimizer_state"] >= 2 * params  # exp_avg, exp_avg_sq (and step counters)
    rows = {r[0]: r for r in last["modules"]}
    assert {"<root>", "small", "wide", "out"} <= set(rows)
    assert all(rows[m][1] >= 1 for m in ("small", "wide", "out"))  # calls


def test_forward_memory_is_attributed_to_the_module_that_allocates_it():
    run = _train(Wide())
    measured = [r for r in run.records["modules"] if r["counter"]]
    rows = {r[0]: r for r in measured[-1]["modules"]}
    # wide's forward leaves a 64 x 4096 float activation: far more than small's 64 x 16
    assert rows["wide"][2] > 10 * max(rows["small"][2], 1)
    assert rows["wide"][2] >= 64 * 4096 * 4 * 0.5
    assert any(r[3] != 0 for r in measured[-1]["modules"])  # some backward memory seen


def test_the_counter_is_read_on_every_fourth_detail_step_and_calls_and_outputs_on_each():
    run = _train(Wide(), steps=40)
    recs = run.records["modules"]
    assert len(recs) > MEASURE_EVERY
    assert [bool(r["counter"]) for r in recs] == [i % MEASURE_EVERY == 0 for i in range(len(recs))]
    for r in recs:
        rows = {row[0]: row for row in r["modules"]}
        assert rows["wide"][1] == 1  # calls counted on every detail step
        if not r["counter"]:
            assert rows["wide"][2] == rows["wide"][3] == 0 and "activation" not in r["categories"]
    table = module_table(run).set_index("module")
    # the means are over the measured steps: the unmeasured zeros do not halve the forward bytes
    assert table.loc["wide", "forward"] >= 64 * 4096 * 4 * 0.5


def test_reads_too_dear_for_a_step_are_not_made_and_the_run_says_so(monkeypatch):
    """A heap fragmented by a leak made each read around a module call cost ~33 ms: 12,800 of them
    a measured step of an 800-block model. Such a step counts calls and outputs, reads nothing."""
    import time

    from memleak.probes import budget, modules

    ok, cost = budget.reads_affordable(lambda: time.sleep(1e-3), 400, plain=0.06)
    assert not ok and cost >= 0.4
    assert budget.reads_affordable(lambda: None, 400, plain=0.06)[0]
    monkeypatch.setattr(modules, "reads_affordable", lambda read, reads, plain: (False, 412.4))
    run = _train(Wide(), steps=20)
    assert not any(r["counter"] for r in run.records["modules"])
    assert all({row[0]: row for row in r["modules"]}["wide"][1] == 1 for r in run.records["modules"])
    limited = [e for e in run.events if e.get("event") == "probe_limited"]
    assert len(limited) == 1 and "would cost 412.4 s a step" in limited[0]["reason"]


class Caching(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.cache = []

    def forward(self, x):
        h = self.lin(x)
        self.cache.append(h.detach())
        return h


def test_attribute_scan_finds_a_growing_cache_at_level_modules():
    model = nn.Sequential(nn.Linear(16, 16), Caching())
    run = _train(model, steps=60)
    assert "holders" in run.records
    report = memleak.analyze(run)
    assert report.verdict.value == "leak"
    top = report.suspects[0]
    assert top.location == "1.cache" and top.kind.value == "cached_tensor"


def test_outputs_kept_alive_by_a_hook_are_attributed_to_their_module():
    model = Wide()
    kept = []
    h = model.small.register_forward_hook(lambda m, i, o: kept.append(o))
    try:
        run = _train(model, steps=50)
    finally:
        h.remove()
    alive = run.records["modules"][-1]["alive"]
    assert {row[0] for row in alive} == {"small"}


@pytest.mark.parametrize("level", ["modules", "full"])
def test_hooks_removed_on_exit_and_on_error(level):
    model = Wide()
    with pytest.raises(RuntimeError):
        with memleak.track(model, level=level) as tracker:
            for step in range(12):
                model(torch.randn(4, 16)).sum().backward()
                tracker.step()
                if step == 7:
                    raise RuntimeError("stop")
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
        assert not m._backward_hooks and not m._backward_pre_hooks


def test_no_model_means_no_module_probe():
    with memleak.track(None, level="modules") as tracker:
        for _ in range(3):
            tracker.step()
    run = tracker.run()
    assert "modules" not in run.records
    assert any(e.get("probe") == "modules" for e in run.events)
