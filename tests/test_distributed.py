"""Distributed runs: one file per rank, merged by memleak.load(folder), reported per rank (synthetic
ranks; real gloo ranks in tests/stacks/test_ddp_fsdp2.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import memleak
from memleak.io import load_ranks
from memleak.io import RunWriter

KIB, MIB = 1024, 2**20


# The runs of real gloo ranks (one spawn, DDP and FSDP2) are in tests/stacks/test_ddp_fsdp2.py.


# ---------------------------------------------------------------- synthetic ranks (fast)

def _write_rank(folder: Path, rank: int, world: int, steps: int = 200, base: int = 1 << 30,
                slope: int = 0, name: str | None = None, noise: int = 4096) -> Path:
    rng = np.random.default_rng(rank)
    path = folder / (name or f"run-rank{rank}-of{world}.jsonl")
    w = RunWriter(path)
    w.header({"device": f"cuda:{rank}", "rank": rank, "world_size": world, "level": "counters",
              "device_total_bytes": 80 * 2**30, "host": "node0"})
    for i in range(steps):
        w.step({"step": i, "time": 0.1 * (i + 1), "duration": 0.1,
                "allocated_bytes": base + slope * i + int(rng.integers(0, noise)),
                "reserved_bytes": base + 512 * MIB})
    w.close()
    return path


def test_a_rank_holding_much_more_than_the_median_is_flagged(tmp_path):
    for r in range(4):
        _write_rank(tmp_path, r, 4, base=(3 << 30) if r == 0 else (1 << 30))
    report = memleak.analyze(memleak.load(tmp_path))
    assert report.verdict == "clean"
    assert [(d.rank, d.kind) for d in report.divergences] == [(0, "holds_more")]
    assert "rank 0 holds 3.0 GiB" in str(report)


def test_ranks_that_all_leak_merge_into_one_suspect(tmp_path):
    for r in range(3):
        _write_rank(tmp_path, r, 3, slope=MIB)
    report = memleak.analyze(memleak.load(tmp_path))
    assert report.verdict == "leak"
    assert report.suspects[0].location.startswith("ranks 0-2: ")
    assert report.divergences == []


def test_steps_meta_and_missing_ranks(tmp_path):
    _write_rank(tmp_path, 0, 3, steps=10)
    _write_rank(tmp_path, 2, 3, steps=12)
    run = memleak.load(tmp_path)
    assert list(run.ranks) == [0, 2]
    assert len(run.steps) == 22 and set(run.steps["rank"]) == {0, 2}
    assert run.meta["host"] == "node0" and "rank" not in run.meta and run.meta["world_size"] == 3
    assert any("no run file for rank 1" in p for p in run.problems)
    assert len(run) == 12 and run[2] is run.ranks[2]
    assert "ranks 0, 2 of 3" in repr(run)
    assert run.memory_column() == "allocated_bytes" and run.table("census").empty


def test_two_files_of_the_same_rank_are_an_error_naming_them(tmp_path):
    _write_rank(tmp_path, 0, 1, name="a.jsonl")
    _write_rank(tmp_path, 0, 1, name="b.jsonl")
    with pytest.raises(memleak.RunFileError, match=r"two run files for rank 0: a.jsonl and b.jsonl"):
        memleak.load(tmp_path)


def test_rank_from_the_file_name_when_the_header_has_none(tmp_path):
    for r in range(2):
        p = _write_rank(tmp_path, r, 2)
        lines = p.read_text().splitlines()
        header = json.loads(lines[0])
        del header["rank"], header["world_size"]
        p.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    run = load_ranks(sorted(tmp_path.glob("*.jsonl")))
    assert list(run.ranks) == [0, 1] and run.world_size == 2


def test_a_broken_rank_file_names_the_file(tmp_path):
    _write_rank(tmp_path, 0, 2)
    bad = _write_rank(tmp_path, 1, 2)
    lines = bad.read_text().splitlines()
    lines[5] = "garbage"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(memleak.RunFileError, match=r"run-rank1-of2.jsonl: line 6"):
        memleak.load(tmp_path)
    run = memleak.load(tmp_path, errors="skip")
    assert any(p.startswith("rank 1: line 6") for p in run.problems)


def test_the_summary_of_ranks_carries_each_ranks_live_warning(tmp_path):
    for r in range(3):
        _write_rank(tmp_path, r, 3, slope=MIB if r == 1 else 0)
    leaking = tmp_path / "run-rank1-of3.jsonl"
    # the live check's warning, as the recorder writes it mid-run
    with leaking.open("a") as f:
        f.write(json.dumps({"type": "event", "event": "leak_confirmed", "step": 60, "column": "allocated_bytes",
                            "slope": MIB, "since_step": 8}) + "\n")
    report = memleak.analyze(memleak.load(tmp_path))
    assert report.ranks[1].live_warning is not None
    line = "rank 1: " + report.ranks[1].live_warning
    assert line in " ".join(str(report).split())
    html = report.to_html()
    assert "rank 1: the live check" in html
    assert not any(f"rank {r}: the live check" in str(report) for r in (0, 2))
