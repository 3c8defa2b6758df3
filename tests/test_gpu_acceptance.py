"""The GPU acceptance run (benchmarks/gpu_acceptance.py) on the CPU: its dry run writes every part
into results.json, CUDA-only parts say why they were skipped, a failing or hanging part is
recorded without losing the others, and the checks it runs on fixtures accept the right
fixture and reject the wrong one."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.acceptance import cuda_tests, runner, scenarios
from benchmarks.acceptance.fragmentation import proposed_setting
from benchmarks.acceptance.harness import write_stats
from memleak.io import RunWriter
from memleak.probes.allocator import STAT_COLUMNS
from tests import gpu_fixture_checks as fc

MiB = 1 << 20
NAMES = [name for name, _, _ in runner.PARTS]
CUDA_ONLY = ("allocator", "fragmentation", "oom", "cuda_tests")


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """One dry run with the smallest sizes, in this process: (exit status, results, stdout)."""
    import contextlib
    import io
    import logging

    out = tmp_path_factory.mktemp("acceptance")
    printed = io.StringIO()
    level = logging.getLogger("memleak").level
    with contextlib.redirect_stdout(printed):
        status = runner.main([str(out), "--dry-run", "--preset", "tiny"])
    assert logging.getLogger("memleak").level == level  # quieted per scenario, then put back
    return status, json.loads((out / "results.json").read_text()), printed.getvalue()


def test_the_dry_run_records_every_part_and_prints_a_line_for_each(dry):
    status, results, printed = dry
    assert status == 0, printed
    assert list(results["parts"]) == NAMES
    assert results["dry_run"] and not results["isolated"] and results["machine"]["torch"]
    for name, part in results["parts"].items():
        assert part["status"] and part["summary"] and part["seconds"] >= 0, name
    lines = printed.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == NAMES and "every part passed" in lines[-1]


def test_the_dry_run_leaves_this_process_as_it_found_it(dry):
    import torch

    assert torch.get_default_device() == torch.device("cpu")  # the scenarios ran under torch.device("cpu:0")
    assert torch._C._len_torch_function_stack() == 0 and torch._C._len_torch_dispatch_stack() == 0


def test_cuda_only_parts_are_skipped_with_their_reason(dry):
    parts = dry[1]["parts"]
    for name in CUDA_ONLY:
        assert parts[name]["status"] == "skipped: no CUDA" and parts[name]["reason"], name
    assert parts["fixtures"]["status"].startswith("skipped: no CUDA")


def test_the_cpu_side_of_each_part_runs_its_checks(dry):
    parts = dry[1]["parts"]
    snap = parts["snapshot"]
    assert snap["status"] == "pass" and snap["synthetic"]["trace_entries"] == [2000, 2000]
    assert snap["checks"]["synthetic: diff names the line that kept the tensors"]["top_count"] == 4
    head = parts["headroom"]
    assert head["status"] == "pass" and head["prediction_error"] <= 0.10 and "no CUDA" in head["bisection"]
    over = parts["overhead"]
    assert over["status"] == "pass" and set(over["eager"]) >= {"counters", "modules", "full", "untracked_step_ms"}
    scen = parts["scenarios"]
    assert scen["status"] == "pass" and scen["levels"]["counters"]["pairs"] == 1
    assert {r["device"] for r in scen["rows"]} == {"cpu", "cpu:0"}  # baseline, and the default-device path


def _fake_parts(monkeypatch, behaviour):
    """Parts replaced by `behaviour[name]` (default: an instant pass), with a short cap."""
    def part_function(name):
        return behaviour.get(name, lambda ctx: {"status": "pass", "summary": f"{name} ok"})

    monkeypatch.setattr(runner, "part_function", part_function)
    monkeypatch.setattr(runner, "PARTS", [(n, m, 0.3 if n == "oom" else cap) for n, m, cap in runner.PARTS])


def test_a_failing_part_and_a_hanging_part_lose_nothing_else(tmp_path, monkeypatch, capsys):
    def broken(ctx):
        raise RuntimeError("the allocator part broke")

    def hangs(ctx):
        ctx.partial["progress"] = 1
        while True:
            time.sleep(0.01)

    _fake_parts(monkeypatch, {"allocator": broken, "oom": hangs})
    assert runner.main([str(tmp_path), "--dry-run"]) == 1
    parts = json.loads((tmp_path / "results.json").read_text())["parts"]
    assert list(parts) == NAMES
    assert parts["allocator"]["status"] == "error" and "the allocator part broke" in parts["allocator"]["summary"]
    assert any("RuntimeError" in line for line in parts["allocator"]["traceback"])
    assert parts["oom"]["status"] == "timeout" and parts["oom"]["partial"] == {"progress": 1}
    assert parts["oom"]["seconds"] < 5
    assert all(parts[n]["status"] == "pass" for n in NAMES if n not in ("allocator", "oom"))
    assert "not passed: allocator, oom" in capsys.readouterr().out


CHILD = """
import json, sys, time
from pathlib import Path
out, name = Path(sys.argv[1]), sys.argv[sys.argv.index("--child") + 1]
if name == "allocator":
    (out / "parts").mkdir(exist_ok=True)
    (out / "parts" / "allocator.json").write_text(json.dumps({"status": "pass", "summary": "from the child"}))
elif name == "oom":
    time.sleep(60)
else:
    print("crashed before writing a result")
    sys.exit(3)
"""


def test_isolated_parts_a_crash_or_hang_in_their_process_is_recorded(tmp_path, monkeypatch):
    entry = tmp_path / "entry.py"
    entry.write_text(CHILD)
    monkeypatch.setattr(runner, "ENTRY", entry)
    monkeypatch.setattr(runner, "GRACE_S", 0.5)
    monkeypatch.setattr(runner, "PARTS", [(n, m, 0.5 if n == "oom" else cap) for n, m, cap in runner.PARTS])
    out = tmp_path / "out"
    assert runner.main([str(out), "--dry-run", "--isolate", "--parts", "allocator,oom,headroom"]) == 1
    parts = json.loads((out / "results.json").read_text())["parts"]
    assert list(parts) == ["allocator", "oom", "headroom"]
    assert parts["allocator"] == {**parts["allocator"], "status": "pass", "summary": "from the child"}
    assert parts["oom"]["status"] == "timeout" and parts["oom"]["seconds"] < 10
    assert parts["headroom"]["status"] == "error" and "rc 3" in parts["headroom"]["summary"]
    assert "crashed before writing a result" in parts["headroom"]["log_tail"]


def test_a_run_without_cuda_needs_dry_run(tmp_path, capsys):
    assert runner.main([str(tmp_path)]) == 2
    assert "--dry-run" in capsys.readouterr().err and not (tmp_path / "results.json").exists()
    with pytest.raises(SystemExit):
        runner.main([str(tmp_path), "--dry-run", "--parts", "allocator,nonsense"])
    assert "unknown part(s) nonsense" in capsys.readouterr().err


# ---------------------------------------------------------------- the parts' pure pieces


def test_the_setting_a_fragmentation_finding_proposes_is_read_from_its_fix():
    from memleak.detect import fragmentation as frag
    from tests.test_fragmentation import fragmenting

    # the cache creeps and the allocator retries: segments that grow in place, and a collection threshold
    (finding,) = frag.detect(fragmenting())
    assert proposed_setting(finding.fix) == "expandable_segments:True,garbage_collection_threshold:0.8"
    (finding,) = frag.detect(fragmenting(meta={"pytorch_cuda_alloc_conf": "expandable_segments:True"}))
    assert proposed_setting(finding.fix) == (
        "expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.8")
    assert proposed_setting("Pad the batches.") is None


def test_cuda_test_outcomes_are_read_from_junit_xml(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text("""<testsuites><testsuite>
      <testcase classname="tests.test_a" name="test_ok" time="0.5"/>
      <testcase classname="tests.test_a" name="test_bad" time="1">
        <failure message="assert 1 == 2">trace</failure></testcase>
      <testcase classname="tests.test_b" name="test_skip" time="0"><skipped message="needs a CUDA GPU"/></testcase>
      <testcase classname="tests.test_b" name="test_err" time="0"><error message="fixture broke"/></testcase>
    </testsuite></testsuites>""")
    rows = cuda_tests.parse_junit(xml)
    assert [(r["test"], r["outcome"]) for r in rows] == [
        ("tests.test_a::test_ok", "passed"), ("tests.test_a::test_bad", "failed"),
        ("tests.test_b::test_skip", "skipped"), ("tests.test_b::test_err", "error")]
    assert "assert 1 == 2" in rows[1]["message"] and rows[1]["seconds"] == 1.0
    files = cuda_tests.marked_files()
    assert {"tests/test_probes.py", "tests/test_tracker.py", "tests/test_history.py"} <= set(files)
    assert all("@pytest.mark.cuda" in Path(cuda_tests.REPO, f).read_text() for f in files)
    assert cuda_tests.command(files, xml)[1:5] == ["-m", "pytest", "-m", "cuda"]


def test_scenario_pairs_that_disagree_are_listed():
    rows = {"leak_loss_history|full|cpu": {"verdict": "leak", "rank": 1},
            "leak_loss_history|full|cuda": {"verdict": "clean", "rank": None},
            "benign_eval_no_grad|full|cpu": {"verdict": "clean", "rank": None},
            "benign_eval_no_grad|full|cuda": {"verdict": "clean", "rank": None}}
    s = scenarios.summarize(rows, ["full"], "cuda")["full"]
    assert (s["pairs"], s["verdict_agree"], s["rank_agree"]) == (2, 1, 1)
    assert (s["recall"], s["leaks"], s["false_alarms"], s["benign"]) == (0, 1, 0, 1)
    assert [m["scenario"] for m in s["mismatches"]] == ["leak_loss_history"]


# ---------------------------------------------------------------- the fixture checks


def _meta(folder: Path, **workload) -> None:
    meta = {"device": "synthetic", "driver": "0", "cuda": "0", "torch": "0", "workload": workload}
    (folder / "meta.json").write_text(json.dumps(meta))


def _series_fixture(root: Path, name: str, columns: dict, **workload) -> Path:
    """A fixture folder as the allocator and fragmentation parts write it (run.jsonl, memory_stats.json,
    meta.json), from synthetic allocator series: `columns` maps a step column to its values."""
    folder = root / name
    folder.mkdir()
    n = len(next(iter(columns.values())))
    w = RunWriter(folder / "run.jsonl")
    w.header({"device": "cuda:0", "level": "counters", "device_total_bytes": 80 << 30})
    rows = []
    for i in range(n):
        stats = {key: int(columns[col][i]) if col in columns else 0 for key, col in STAT_COLUMNS.items()}
        w.step({"step": i, "time": 0.01 * (i + 1), "duration": 0.01,
                **{col: stats[key] for key, col in STAT_COLUMNS.items()}})
        rows.append(stats)
    w.close()
    write_stats(folder, rows)
    _meta(folder, **workload)
    return folder


def _linear(leak: int, n: int = 60) -> dict:
    allocated = 200 * MiB + leak * np.arange(n) + np.random.default_rng(0).integers(0, 4096, n) * 512
    return {"allocated_bytes": allocated, "reserved_bytes": np.full(n, 1 << 30), "active_bytes": allocated}


def test_the_series_fixture_checks_accept_the_right_series_and_reject_the_wrong_one(tmp_path):
    from tests.test_fragmentation import fragmenting

    leak = _series_fixture(tmp_path, "leak", _linear(2 * MiB), leak_bytes_per_step=2 * MiB)
    clean = _series_fixture(tmp_path, "clean", _linear(0), leak_bytes_per_step=0)
    steps = fragmenting().steps
    columns = {c: steps[c].to_numpy() for c in steps if c in STAT_COLUMNS.values()}
    frag = _series_fixture(tmp_path, "fragmenting", columns)
    fc.check_leak(leak)
    fc.check_clean(clean)
    fc.check_fragmenting(frag)
    with pytest.raises(AssertionError, match="clean fixture called a leak"):
        fc.check_clean(leak)
    with pytest.raises(AssertionError, match="leak fixture: verdict"):
        fc.check_leak(clean)
    with pytest.raises(AssertionError, match="no fragmentation finding"):
        fc.check_fragmenting(clean)
    rows = json.loads((leak / "memory_stats.json").read_text())
    rows[5]["reserved_bytes.all.current"] += 1
    write_stats(leak, rows)
    with pytest.raises(AssertionError, match="reserved_bytes is not memory_stats"):
        fc.check_probe_columns(leak)
    (clean / "meta.json").write_text(json.dumps({"device": "x", "cuda": "1", "torch": "2"}))
    with pytest.raises(AssertionError, match=r"lacks \['driver'\]"):
        fc.read_meta(clean)


def test_the_snapshot_and_oom_fixture_checks(tmp_path):
    import memleak
    from benchmarks.acceptance import snapshots
    from benchmarks.acceptance.harness import Context
    from benchmarks.acceptance.presets import PRESETS

    ctx = Context(out=tmp_path, cuda=False, dry_run=True, sizes=PRESETS["tiny"]["snapshot"])
    snapshots.run(ctx)  # the synthetic pair, as the snapshot part's dry run writes it
    folder = tmp_path / "snapshot"
    (tmp_path / "work" / "snapshot").rename(folder)
    reserved = int(memleak.load(folder / "after.pickle").fragmentation()["reserved_bytes"].sum())
    _meta(folder, reserved_at_dump=reserved, leak_function="leak_tensors", leak_count=4)
    fc.check_snapshot(folder)
    _meta(folder, reserved_at_dump=reserved, leak_function="leak_tensors", leak_count=5)
    with pytest.raises(AssertionError, match="diff counts 4 kept tensors"):
        fc.check_snapshot(folder)

    oom = tmp_path / "oom"
    oom.mkdir()
    w = RunWriter(oom / "run.jsonl")
    w.header({"device": "cuda:0", "level": "counters"})
    w.step({"step": 0, "time": 0.1, "allocated_bytes": MiB})
    w.event("oom", step=1, message="CUDA out of memory", num_ooms=1)
    w.close()
    _meta(oom, snapshot_in_fixture=False)
    with pytest.raises(AssertionError, match="no snapshot event"):
        fc.check_oom(oom)
    w = RunWriter(oom / "run.jsonl", overwrite=True)
    w.header({"device": "cuda:0", "level": "counters"})
    w.step({"step": 0, "time": 0.1, "allocated_bytes": MiB})
    w.event("oom", step=1, message="CUDA out of memory", num_ooms=1)
    w.event("snapshot", path="oom-snapshot.pickle", step=1)
    w.close()
    fc.check_oom(oom)


def test_the_allocator_comparison_names_the_column_and_step_that_differ(tmp_path):
    import memleak
    from benchmarks.acceptance.allocator import compare_columns
    from benchmarks.acceptance.harness import Checks

    folder = _series_fixture(tmp_path, "leak", _linear(MiB))
    stats = json.loads((folder / "memory_stats.json").read_text())
    raw = [{"stats": row, "free": (70 << 30) - i, "nvml_process_bytes": None} for i, row in enumerate(stats)]
    run = memleak.load(folder)
    checks = Checks()
    compare_columns(run, raw, checks, "t")
    assert not checks.failed and len(checks.items) == len(STAT_COLUMNS) + 3
    raw[3]["stats"]["allocated_bytes.all.current"] += 1
    checks = Checks()
    compare_columns(run, raw, checks, "t")
    assert checks.failed == ["t: allocated_bytes == memory_stats['allocated_bytes.all.current']"]
    assert checks.items[checks.failed[0]]["mismatched_steps"] == [3]


def test_the_nvml_gap_is_taken_at_the_steps_nvml_was_read():
    import types

    import pandas as pd

    from benchmarks.acceptance.allocator import nvml_gap

    # NVML is read on a time budget: the steps between reads are null (an H200 run crashed on them)
    nvml = [1000 * MiB, None, None, 1004 * MiB, None, 1008 * MiB]
    steps = pd.DataFrame({"nvml_process_bytes": [np.nan if v is None else v for v in nvml],
                          "reserved_bytes": [200 * MiB + i * 2 * MiB for i in range(6)]})
    runs = {"clean": types.SimpleNamespace(steps=steps)}
    gap = nvml_gap(object(), None, 500 * MiB, runs)
    assert gap["available"] and gap["gap_end_bytes"] == 1008 * MiB - 210 * MiB
    assert gap["kernels_and_library_handles_bytes"] == 298 * MiB
    steps["nvml_process_bytes"] = np.nan
    assert not nvml_gap(object(), None, 500 * MiB, runs)["available"]


def test_the_fragmentation_checks_read_the_workers_results():
    from benchmarks.acceptance.fragmentation import _check_growing, _check_split
    from benchmarks.acceptance.harness import Checks

    default = {"allocated_min": 64 * MiB, "allocated_max": 64 * MiB, "reserved_at_tenth": 1 << 30,
               "reserved_end": 4 << 30, "findings": ["fragmentation"],
               "fix": "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before the first CUDA allocation (...)."}
    checks = Checks()
    runs = {"growing default": default, "growing expandable_segments:True": {"reserved_end": 1 << 30}}
    assert _check_growing(runs, checks) == "expandable_segments:True" and not checks.failed
    runs["growing expandable_segments:True"] = {"reserved_end": 4 << 30}
    _check_growing(runs, checks)
    assert checks.failed == ["expandable_segments:True reduces the reserve"]
    split = {"reserved_end": 1024 * MiB, "allocated_end": 240 * MiB, "inactive_split_end": 784 * MiB,
             "snapshot_reserved": 1024 * MiB, "snapshot_allocated": 240 * MiB, "snapshot_inactive_split": 784 * MiB}
    capped = {**split, "reserved_end": 240 * MiB, "inactive_split_end": 0}
    checks = Checks()
    _check_split({"split default": split, "split max_split_size_mb:128": capped}, checks)
    assert not checks.failed and len(checks.items) == 3
    _check_split({"split default": split, "split max_split_size_mb:128": {"error": "rc 1"}}, checks)
    assert checks.failed == ["split cases ran"]


#: What the device machine has besides the standard library (docs/gpu.md): the run needs nothing else.
ALLOWED = {"torch", "numpy", "pandas", "scipy", "matplotlib", "pynvml", "pytest", "hypothesis", "memleak", "tests",
           "benchmarks"}


def test_the_acceptance_run_imports_only_what_the_device_machine_has():
    import ast

    repo = Path(cuda_tests.REPO)
    files = [*repo.glob("benchmarks/acceptance/*.py"), repo / "benchmarks" / "gpu_acceptance.py",
             repo / "benchmarks" / "snapshot_load.py", repo / "benchmarks" / "detection.py",
             repo / "tests" / "gpu_fixture_checks.py"]
    used = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                used |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                used.add(node.module.split(".")[0])
    assert used - set(sys.stdlib_module_names) - ALLOWED == set()
    assert {"torch", "memleak", "pynvml"} <= used  # the walk saw the imports
