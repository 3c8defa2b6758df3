"""The detail records are declared: every key a probe writes into a run file is a field of its
dataclass (memleak/records.py), and a record read back and written again is the same record."""
from __future__ import annotations

import gc
import json
from dataclasses import fields

import pandas as pd
import pytest
import torch
from torch import nn

import memleak
from memleak.records import (
    BirthCohort,
    BirthsRecord,
    Event,
    HolderRow,
    HoldersRecord,
    ModuleOutputs,
    ModuleRow,
    ModulesRecord,
    SavedCohort,
    SavedRecord,
)
from memleak.run import Run

#: record type -> (its dataclass, {field holding rows: the row's dataclass})
TYPES = {
    "holders": (HoldersRecord, {"holders": HolderRow}),
    "births": (BirthsRecord, {"cohorts": BirthCohort}),
    "saved": (SavedRecord, {"cohorts": SavedCohort}),
    "modules": (ModulesRecord, {"modules": ModuleRow, "alive": ModuleOutputs}),
}


def names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


class Cached(nn.Module):
    """Keeps every forward's output on itself: a module-attribute leak (seen at level modules too)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.cache: list[torch.Tensor] = []

    def forward(self, x):
        y = self.lin(x)
        self.cache.append(y)
        return y


def _record(tmp_path, level: str, steps: int = 40) -> list[dict]:
    """A small loop with planted leaks (a list keeping outputs with their graphs, a running sum
    carrying its graph, a module caching its outputs), tracked into a run file; its lines."""
    torch.manual_seed(0)
    model = nn.Sequential(Cached(), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history, total = [], torch.zeros(())
    with memleak.track(model, optimizer=opt, level=level, out=tmp_path) as tracker:
        for _ in range(steps):
            out = model(torch.randn(8, 32))
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            history.append(out)
            total = total + loss
            tracker.step()
    del history, total
    return [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, list[dict]]:
    """The detail records of a run at level full and one at level modules, by type."""
    by: dict[str, list[dict]] = {}
    for level in ("full", "modules"):
        for rec in _record(tmp_path_factory.mktemp(level), level):
            if isinstance(rec, dict) and rec.get("type") in TYPES:
                by.setdefault(rec["type"], []).append(rec)
    return by


def test_every_key_a_probe_writes_is_a_declared_field(recorded):
    assert set(recorded) == set(TYPES), "the planted leaks should make the probes write every record type"
    for kind, recs in recorded.items():
        cls, nested = TYPES[kind]
        for rec in recs:
            assert set(rec) - {"type"} <= names(cls), (kind, set(rec) - {"type"} - names(cls))
            for key, row_cls in nested.items():
                for row in rec.get(key, []):
                    if isinstance(row, list):  # modules write their rows as lists of the fields, in order
                        assert len(row) == len(fields(row_cls)), (kind, key, row)
                    else:
                        assert set(row) <= names(row_cls), (kind, key, set(row) - names(row_cls))


def test_the_optional_fields_are_exercised(recorded):
    """The planted leaks make the probes write the fields they write only sometimes."""
    rows = [row for rec in recorded["holders"] for row in rec["holders"]]
    assert any("seq" in r for r in rows) and any(r.get("linked") for r in rows)
    assert any(r.get("stored") for r in rows)
    assert any(rec.get("scope") == "model" for rec in recorded["holders"])  # the level-modules scan
    assert any(rec["cohorts"] for rec in recorded["births"]) and any(rec["cohorts"] for rec in recorded["saved"])
    assert any(rec["alive"] for rec in recorded["modules"])


def test_records_read_back_and_write_the_same_dict(recorded):
    for kind, recs in recorded.items():
        cls, _ = TYPES[kind]
        for d in recs:
            rec = cls.from_dict(d)
            assert cls.from_dict(rec.to_dict()) == rec
            assert rec.to_dict() == {k: v for k, v in d.items() if k != "type"}  # nothing lost, nothing added


def test_run_gives_the_dataclasses_built_once(recorded):
    run = Run({"device": "cpu"}, pd.DataFrame({"step": range(40)}), records={k: list(v) for k, v in recorded.items()})
    assert all(isinstance(r, HoldersRecord) for r in run.holders)
    assert all(isinstance(r, BirthsRecord) for r in run.births)
    assert all(isinstance(r, SavedRecord) for r in run.saved)
    assert all(isinstance(r, ModulesRecord) for r in run.module_records)
    assert [r.step for r in run.holders] == sorted(r.step for r in run.holders)
    assert run.holders[0] is run.holders[0]  # cached: the second access builds nothing
    assert gc.isenabled()  # the collector paused for the build runs again
    first = run.holders
    run.records["holders"].append({"type": "holders", "step": 10**6, "holders": [{"holder": "late"}]})
    assert len(run.holders) == len(first) + 1 and run.holders[-1].holders[0].holder == "late"
    assert isinstance(run.table("holders")["holders"].iloc[0], list)  # the table keeps the raw dicts


def test_older_and_newer_files_load():
    """Fields an older file lacks take their defaults; keys a newer memleak adds are ignored."""
    old = HoldersRecord.from_dict({"step": 3, "holders": [{"holder": "h", "count": 2, "bytes": 8}]})
    assert old.holders[0] == HolderRow("h", count=2, bytes=8) and old.buffers == {} and old.scope == ""
    assert BirthsRecord.from_dict({"step": 1, "cohorts": [{"born": 0, "site": "a.py:1"}]}).gc2 is None
    new = BirthCohort.from_dict({"born": 0, "site": "a.py:1", "type": "x", "from_the_future": 1})
    assert new == BirthCohort(0, "a.py:1")
    assert ModulesRecord.from_dict({"step": 2, "modules": [["m", 1, 2, 3, 4, 99]]}).modules == (ModuleRow("m", 1, 2, 3, 4),)
    assert HolderRow.from_dict({"holder": "h", "seq": [1, 5]}).seq == (1, 5)


def test_defaults_are_left_out_where_the_probe_left_them_out():
    row = HolderRow("h", "local", 1.0, 4, 0.0, 0.0, 0, 0)
    assert row.to_dict() == {"holder": "h", "kind": "local", "count": 1.0, "bytes": 4, "grad": 0.0, "old": 0.0,
                             "old_bytes": 0, "nodes": 0}
    assert HolderRow("h", seq=(1, 2), linked=True, stored="a.py:3").to_dict()["seq"] == [1, 2]
    assert "cycle" not in BirthCohort(0, "a.py:1").to_dict() and BirthCohort(0, "s", cycle="grad").to_dict()["cycle"]


def test_records_are_frozen():
    row = HolderRow("h")
    with pytest.raises(AttributeError):
        row.count = 3  # type: ignore[misc]
    assert hash(row) == hash(HolderRow("h"))


def test_event_keeps_its_details():
    d = {"event": "probe_limited", "probe": "tensors", "reason": "compiled"}
    ev = Event.from_dict({"type": "event", **d})
    assert ev.event == "probe_limited" and ev.details == {"probe": "tensors", "reason": "compiled"}
    assert ev.to_dict() == d and Event.from_dict(ev.to_dict()) == ev


def test_run_format_page_lists_every_field():
    """docs/run-format.md names every field of every detail record."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "run-format.md").read_text()
    section = page[page.index("### Detail records"):page.index("## Reading a run without memleak")]
    for cls, nested in TYPES.values():
        for c in (cls, *nested.values()):
            assert f"`{c.__name__}`" in section or f"`{c.__name__}`s" in section, c.__name__
            order = [f.name for f in fields(c)]
            if c in (ModuleRow, ModuleOutputs):  # written as lists: the page gives their order
                assert f"`[{', '.join(order)}]`" in section, c.__name__
                continue
            missing = [n for n in order if f"`{n}`" not in section]
            assert not missing, f"{c.__name__}: {missing} not in docs/run-format.md"
