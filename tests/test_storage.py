"""Run files: compact delta-encoded steps, round trips, kill -9, and bad input named clearly."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memleak
from memleak.schema import SCHEMA_VERSION
from memleak.io import RUN_SUFFIX, RecordSink, RunWriter, load, read_run_file, run_from_records
from memleak.io.codec import LAYOUT
from memleak.io.step_lines import StepLines
from memleak.io.writer import FLUSH_STEPS
from memleak.io.reader import decode_lines, read_fast, split_lines

ROOT = Path(__file__).resolve().parents[1]


def _write_both(path: Path, steps: list[dict], meta: dict | None = None) -> tuple[RunWriter, RecordSink]:
    w, s = RunWriter(path), RecordSink()
    for sink in (w, s):
        sink.header(meta or {"device": "cpu", "level": "counters"})
        for i, v in enumerate(steps):
            sink.step(v)
            if i == 2:
                sink.event("probe_skipped", probe="nvml", reason="no GPU")
                sink.record("census", {"site": "x.py:1", "bytes": 10})
    w.close()
    return w, s


def _slow(path: Path):
    records, truncated, problems = decode_lines(path, split_lines(path.read_bytes()), "raise")
    return run_from_records(records, path=str(path), truncated=truncated, problems=problems)


def _cuda_like(n: int) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        alloc = 2**30 + 4096 * i + int(rng.integers(0, 512)) * 512
        out.append({"step": i, "time": 0.1 * (i + 1) + float(rng.random()) * 1e-3, "duration": 0.1 + float(rng.random()) * 1e-3,
                    "allocated_bytes": alloc, "reserved_bytes": 2**31, "active_bytes": alloc + 1024,
                    "requested_bytes": alloc - 100, "num_ooms": 0, "heap_bytes": 10**8 + i % 3,
                    "tensor_bytes": alloc if i % 5 == 0 else None, "tensor_count": 10 if i % 5 == 0 else None})
    return out


def test_file_and_memory_sinks_give_the_same_run(tmp_path):
    w, s = _write_both(tmp_path / "r.jsonl", _cuda_like(300))
    from_file = read_run_file(tmp_path / "r.jsonl")
    live = run_from_records(s.records)
    pd.testing.assert_frame_equal(from_file.steps, live.steps)
    pd.testing.assert_frame_equal(_slow(tmp_path / "r.jsonl").steps, live.steps)
    assert from_file.meta == live.meta and from_file.meta["schema"] == SCHEMA_VERSION
    assert from_file.events == live.events == [{"event": "probe_skipped", "probe": "nvml", "reason": "no GPU"}]
    assert from_file.records == live.records == {"census": [{"site": "x.py:1", "bytes": 10}]}
    assert from_file.steps["allocated_bytes"].dtype == np.int64 and from_file.steps["step"].tolist() == list(range(300))
    assert from_file.steps["tensor_bytes"].isna().sum() == 240  # NaN where no census was taken
    assert not from_file.truncated and from_file.problems == []


def test_the_writer_keeps_nothing_in_memory_and_reads_its_records_back(tmp_path):
    w, s = _write_both(tmp_path / "r.jsonl", _cuda_like(50))
    assert w._records == []
    pd.testing.assert_frame_equal(run_from_records(w.records).steps, run_from_records(s.records).steps)


def test_steps_are_compact(tmp_path):
    path = tmp_path / "r.jsonl"
    _write_both(path, _cuda_like(2000))
    lines = path.read_text().splitlines()
    assert json.loads(lines[1])["type"] == LAYOUT
    per_step = sum(len(l) + 1 for l in lines if l.startswith("[")) / 2000
    print(f"{per_step:.1f} bytes/step")
    assert per_step < 80
    assert all(isinstance(json.loads(l), (dict, list)) for l in lines)  # every line is JSON


def test_time_is_rounded_relatively():
    s = RecordSink()
    s.header({})
    s.step({"step": 0, "time": 123456.7891234, "duration": 0.0123456789})
    s.step({"step": 1, "time": 0.000123456789, "duration": 1.5e-7})
    steps = run_from_records(s.records).steps
    assert steps["time"].tolist() == [123456.8, 0.0001234568]
    assert steps["duration"].tolist() == [0.01235, 1.5e-7]


def test_unusual_steps_round_trip(tmp_path):
    steps = [{"step": 0, "a": 1}, {"step": 1, "a": 1.5}, {"step": 5}, {"a": 2},  # step absent: kept its value
             {"step": 7, "b": None, "a": float("nan")}, {"step": 8, "a": 2**60},  # too big for a float: plain record
             {"step": 9, "flag": True, "name": "x"}, {"step": 10, **{f"c{k}": k for k in range(70)}},  # 2 masks
             {"step": 11, "c69": np.int64(3), "c68": np.float32(0.5)}]
    w, s = _write_both(tmp_path / "r.jsonl", steps)
    pd.testing.assert_frame_equal(read_run_file(tmp_path / "r.jsonl").steps, run_from_records(s.records).steps)
    got = read_run_file(tmp_path / "r.jsonl").steps
    assert got["step"].tolist() == [0, 1, 5, 5, 7, 8, 9, 10, 11]
    assert got["a"].iloc[5] == 2**60 and got["name"].iloc[-1] == "x" and got["c69"].iloc[-1] == 3



@pytest.mark.parametrize("steps", [_cuda_like(300), [{"step": 0, "a": 1}, {"step": 1, "a": 1.5}, {"step": 5}, {"a": 2},
                                                     {"step": 7, "a": float("nan")}, {"step": 8, "a": True},
                                                     {"step": 9, "a": 3.0, "b": -1}, {"step": 10, "b": -1.5}]])
def test_the_one_pass_step_encoding_writes_what_the_general_one_does(tmp_path, steps, monkeypatch):
    """Steps whose columns the layout already has take a one-pass path (`_steady_line`); a file
    written with it is byte for byte the file the general path writes."""
    _write_both(tmp_path / "fast.jsonl", steps)
    monkeypatch.setattr(StepLines, "_steady_line", lambda self, values: None)
    _write_both(tmp_path / "general.jsonl", steps)
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "general.jsonl").read_bytes()

_number = st.one_of(st.none(), st.integers(-2**53 + 1, 2**53 - 1),
                    st.floats(allow_nan=True, allow_infinity=True, width=64))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 10**6)),
                          st.dictionaries(st.sampled_from(["time", "allocated_bytes", "x", "y"]), _number, max_size=4)),
                min_size=1, max_size=25))
def test_any_steps_read_back_as_the_memory_sink_has_them(tmp_path, steps):
    # step numbers only go forward (each drawn number is a gap): one going back is read as two writers mixed
    at = itertools.accumulate(n or 0 for n, _ in steps)
    steps = [({"step": a} if n is not None else {}) | values for a, (n, values) in zip(at, steps)]
    path = tmp_path / f"h{abs(hash(str(steps)))}.jsonl"
    w, s = _write_both(path, steps)
    expect = run_from_records(s.records).steps
    got = read_run_file(path).steps
    # None and NaN both mean "no value"; compare as floats (every int here is exact in a float64)
    pd.testing.assert_frame_equal(got.astype("float64"), expect.astype("float64"), check_dtype=False)
    assert read_fast(path, path.read_bytes()) is not None or any(
        isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**53 for st_ in steps for v in st_.values())


# ---------------------------------------------------------------- killed runs

_KILLED = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from memleak.io import RunWriter
    w = RunWriter(sys.argv[1])
    w.header({{"device": "cpu"}})
    for i in range(100):
        w.step({{"step": i, "time": 0.1 * (i + 1), "allocated_bytes": 1000 + i}})
    if sys.argv[2] == "mid-line":
        w._fh.write(b'[14,10.1,11')  # a record cut short as a kill -9 inside a write would leave it
        w._fh.flush()
    if sys.argv[2] == "slow-steps":  # steps half a second apart or more are each written at once
        for i in range(100, 103):
            time.sleep(0.55)
            w.step({{"step": i, "time": 0.1 * (i + 1), "allocated_bytes": 1000 + i}})
    os.kill(os.getpid(), 9)
""")


@pytest.mark.parametrize("where", ["between-steps", "mid-line", "slow-steps"])
def test_a_run_killed_with_sigkill_loads_up_to_its_last_batch_of_steps(tmp_path, where):
    path = tmp_path / "killed.jsonl"
    proc = subprocess.run([sys.executable, "-c", _KILLED.format(root=str(ROOT)), str(path), where])
    assert proc.returncode == -9
    run = memleak.load(path)
    steps = run.steps["step"].tolist()
    # steps go out FLUSH_STEPS at a time: what was held back when the kill came is lost, no more
    last = 103 if where == "slow-steps" else 100 // FLUSH_STEPS * FLUSH_STEPS
    assert steps == list(range(last))
    assert run.steps["allocated_bytes"].iloc[-1] == 1000 + last - 1
    assert run.truncated == (where == "mid-line")
    if run.truncated:
        assert "cut short" in run.problems[0]
        assert _slow(path).truncated and len(_slow(path).steps) == last


def test_an_event_writes_the_steps_before_it_first(tmp_path):
    w = RunWriter(tmp_path / "r.jsonl")
    w.header({"device": "cpu"})
    for i in range(3):
        w.step({"step": i, "allocated_bytes": 10 * i})
    w.event("oom", step=3)  # an OOM's event must reach the disk at once, after the steps before it
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert [json.loads(x).get("event") for x in lines[-1:]] == ["oom"]
    assert len([x for x in lines if x.startswith("[")]) == 3
    w.close()


# ---------------------------------------------------------------- bad input

def _good_file(path: Path, n: int = 20) -> list[str]:
    _write_both(path, _cuda_like(n))
    return path.read_text().splitlines()


@pytest.mark.parametrize("content, problem", [
    ("", "the file is empty"),
    ("\n  \n", "the file is empty"),
    ("garbage\nmore garbage\n", "not a memleak run file"),
    ('{"type": "step", "step": 0}\n', "the first record is not a memleak header"),
    ('{"type": "header", "schema": 99}\n', "schema version 99 is not supported"),
    ('[1, 2]\n', "not a memleak run file"),
])
def test_bad_files_raise_an_error_naming_the_file_and_the_problem(tmp_path, content, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(memleak.RunFileError, match=problem) as e:
        memleak.load(path)
    assert e.value.path == str(path) and str(e.value).startswith(str(path))


@pytest.mark.parametrize("corrupt", ["cut", "garbage", "empty-field", "extra-value", "binary"])
def test_a_broken_line_in_the_middle_raises_naming_the_line_and_skip_reads_around_it(tmp_path, corrupt):
    path = tmp_path / "mid.jsonl"
    lines = _good_file(path)
    assert lines[10].startswith("[")
    lines[10] = {"cut": lines[10][:7], "garbage": "garbage", "empty-field": lines[10].replace(",", ",,", 1),
                 "extra-value": lines[10][:-1] + ",5]", "binary": "\x00\x01\x02"}[corrupt]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(memleak.RunFileError, match=r"mid.jsonl: line 11 is not a valid record"):
        memleak.load(path)
    run = memleak.load(path, errors="skip")
    assert len(run.steps) == 19 and "line 11" in run.problems[0]


def test_a_folder_with_no_run_and_a_missing_path(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(memleak.RunFileError, match="the folder holds no run file"):
        load(tmp_path)
    with pytest.raises(memleak.RunFileError, match="no such file or folder"):
        load(tmp_path / "nope")
    with pytest.raises(memleak.UsageError):
        read_run_file(tmp_path / "notes.txt", errors="ignore")


def test_a_folder_with_one_run_loads_it(tmp_path):
    _good_file(tmp_path / f"run{RUN_SUFFIX}")
    assert isinstance(load(tmp_path), memleak.Run)


def test_hand_written_plain_step_records_still_read(tmp_path):
    path = tmp_path / "old.jsonl"
    recs = [{"type": "header", "schema": SCHEMA_VERSION, "device": "cpu"},
            {"type": "step", "step": 0, "allocated_bytes": 10}, {"type": "step", "step": 1},
            {"type": "step", "step": 2, "allocated_bytes": 30}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert read_run_file(path).steps["allocated_bytes"].tolist() == [10, 10, 30]


def test_detail_records_come_back_typed_by_step(tmp_path):
    from memleak.schema import RecordType
    w = RunWriter(tmp_path / "r.jsonl")
    w.header({"device": "cpu"})
    w.record(RecordType.HOLDERS, {"step": 8, "holders": [{"holder": "history", "count": 2}]})
    w.record(RecordType.HOLDERS, {"step": 4, "holders": [{"holder": "history", "count": 1}]})
    w.record(RecordType.BIRTHS, {"step": 4, "cohorts": [{"born": 1, "site": "t.py:3", "cycle": "grad"}]})
    w.close()
    run = read_run_file(tmp_path / "r.jsonl")
    assert [r.step for r in run.holders] == [4, 8] and run.holders[1].holders[0].count == 2
    assert run.births[0].cohorts[0].cycle == "grad"
    assert run.saved == [] and run.module_records == []


def test_every_name_memleak_io_exports_is_what_its_module_defines():
    import importlib

    import memleak.io as io

    for name in io.__all__:
        module = importlib.import_module(f"memleak.io.{io._WHERE[name]}")
        assert getattr(io, name) is getattr(module, name), name
    assert sorted(io.__all__) == sorted(io._WHERE)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        io.nothing  # noqa: B018
