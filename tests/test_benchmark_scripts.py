"""The measuring scripts under benchmarks/ still run against today's code (a refactor once broke
one silently): each runs briefly in a process of its own and prints its table."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_step_cost_prints_each_level_with_its_young_and_steady_cost():
    # three rounds: one step 0 jitters by +-20 ms of CPU time here, as much as counters costs in 64
    # steps; the figures are medians over rounds
    out = _run(str(BENCH / "step_cost.py"), "--levels", "counters", "auto", "--steps", "64", "--rounds", "3",
               "--parts")
    lines = [line for line in out.splitlines() if line.startswith("  ") and "level" not in line]
    rows = {line.split()[0]: line.split() for line in lines if ":" not in line.split()[0]}
    parts = [line for line in lines if ": boundary" in line]
    # where counters' boundary goes: the heap read, the host probe, the record, and the rest
    assert len(parts) == 2 and all(p in parts[0] for p in ("heap read", "probe host", "record written", "rest"))
    assert set(rows) == {"counters", "auto"}
    young = {lv: float(rows[lv][3]) for lv in rows}  # ms
    assert young["auto"] > young["counters"]  # auto runs its young steps as level full does
    whole = {lv: float(rows[lv][9]) for lv in rows}  # the loop's ratio the parts add up to
    assert all(1.0 < w < 2.0 for w in whole.values()), rows


def test_run_format_compares_the_encodings():
    pytest.importorskip("orjson")  # the plain JSON Lines writers it compares against
    out = _run(str(BENCH / "run_format.py"), "--steps", "500", "--repeat", "1")
    assert any(line.startswith("memleak ") for line in out.splitlines())
