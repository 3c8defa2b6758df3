"""Modules that gain registered submodules or parameters every step (a layer created in forward and
stored on the model), and modules kept outside the model in plain containers."""
from __future__ import annotations

import pandas as pd
import torch
from torch import nn

import memleak
from memleak.detect import culprits
from memleak.run import Run
from memleak.schema import Kind

STEPS = [1, 10, 19, 28]


def _run(entries: list[int], nbytes: list[int], path: str = "heads") -> Run:
    recs = [
        {"step": s, "steps": 1, "counter": "heap", "categories": {}, "modules": [], "alive": [],
         "registered": [[path, 0, n, b, b, 0, f"{path}.head_{s}"]] if n else []}
        for s, n, b in zip(STEPS, entries, nbytes, strict=True)
    ]
    return Run({"device": "cpu"}, pd.DataFrame({"step": range(30), "time": range(30)}), records={"modules": recs})


def test_a_container_gaining_a_module_every_step_is_named_with_its_fix():
    found = culprits.detect(_run([2, 11, 20, 29], [1040 * n for n in (2, 11, 20, 29)]))
    assert len(found) == 1
    f = found[0]
    assert f.location == "heads" and f.kind == Kind.CACHED_TENSOR and f.leak and f.confidence >= 0.5
    assert 2000 < f.bytes_per_step < 2200  # parameters and their gradients, per step
    assert any("2 -> 29 entries" in e and "heads.head_28" in e for e in f.evidence)
    assert "__init__" in f.fix and "heads.head_28" in f.fix


def test_a_container_that_grew_once_is_no_leak():
    # a head added for a new task, then none: one rise, then flat
    assert culprits.detect(_run([0, 1, 1, 1], [0, 1040, 1040, 1040])) == []


class PerStepHeads(nn.Module):
    def __init__(self, fresh_key: bool):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.heads = nn.ModuleDict()
        self.fresh_key = fresh_key
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        key = f"head_{self.calls}" if self.fresh_key else "head"  # the same key replaces the old head
        self.heads[key] = nn.Linear(16, 2)
        return self.heads[key](torch.relu(self.fc(x)))


def _train(model, steps=30):
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(steps):
            loss = model(torch.randn(16, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    return tracker


def test_the_probe_records_and_the_report_names_a_module_registered_every_step():
    tracker = _train(PerStepHeads(fresh_key=True))
    rows = [r for rec in tracker.run().module_records for r in rec.registered]
    assert rows and all(r.path == "heads" and r.grew == "submodules" for r in rows)
    last = rows[-1]
    assert last.entries > last.first + 10 and last.newest.startswith("heads.head_")
    assert last.bytes == last.entries * (16 * 2 + 2) * 4 and last.grad_bytes == last.bytes
    top = tracker.report().suspects[0]
    assert top.location == "heads" and top.kind == Kind.CACHED_TENSOR and top.leak


def test_a_module_replaced_under_the_same_key_is_no_leak():
    tracker = _train(PerStepHeads(fresh_key=False))
    # one head from the first call on (none before the loop), replaced every step: a count that stays
    assert {(r.path, r.first, r.entries) for rec in tracker.run().module_records for r in rec.registered} == {
        ("heads", 0, 1)
    }
    assert tracker.report().verdict.value != "leak"


class BufferPerStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.calls = 0

    def forward(self, x):
        out = torch.relu(self.fc(x))
        self.calls += 1
        self.register_buffer(f"snap{self.calls}", out.detach().clone())  # a new name each step: all kept
        return out


def test_a_buffer_registered_every_step_on_the_model_is_named_by_its_family_with_the_buffer_fix():
    tracker = _train(BufferPerStep())
    last = [r for rec in tracker.run().module_records for r in rec.registered][-1]
    assert last.path == "<root>" and last.grew == "buffers" and last.newest.startswith("snap")
    top = tracker.report().suspects[0]
    assert top.location == "snap*" and top.kind == Kind.CACHED_TENSOR and top.leak, str(tracker.report())
    assert any("gains registered buffers" in e for e in top.evidence), top.evidence
    assert "register_buffer" in top.fix and "copy_" in top.fix, top.fix


class ListOfLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.made = []  # a plain list: what it keeps is no submodule, its parameters no model parameters

    def forward(self, x):
        self.made.append(nn.Linear(16, 64))
        return self.made[-1](torch.relu(self.fc(x)))


def test_parameters_of_modules_kept_in_a_plain_list_are_named_by_the_list():
    report = _train(ListOfLayers()).report()
    top = report.suspects[0]
    assert top.location == "made" and top.leak, str(report)
