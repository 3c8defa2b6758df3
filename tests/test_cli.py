"""The `memleak` command: exit codes, one-line errors, the files it writes.

Most cases call the command's `main()` in this process (tests/helpers.py); the report on the
shipped run goes through `python -m memleak` in a subprocess, as users run it, and the console
script is run for its version."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import memleak_in_process

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_RUN = ROOT / "tests" / "data" / "example_run"


def memleak_subprocess(*args, cwd=None, timeout=120):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "memleak", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


memleak = memleak_in_process


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "tmp"
    result = memleak("demo", "--steps", 40, "--out", out, "--device", "cpu")
    return result, out


def test_demo_finds_the_planted_leak(demo):
    result, out = demo
    assert result.returncode == 0, result.stderr
    assert "verdict: LEAK" in result.stdout
    assert {"run.jsonl", "report.txt", "findings.json", "memory.png"} <= {p.name for p in out.iterdir()}


def test_report_on_a_run_folder_and_file(demo, tmp_path):
    _, out = demo
    for path in (out, out / "run.jsonl"):
        result = memleak("report", path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("memleak report:")
        assert "verdict: LEAK" in result.stdout
    result = memleak("report", out, "-o", tmp_path / "rep")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "rep" / "findings.json").read_text())["verdict"] == "leak"
    assert (tmp_path / "rep" / "memory.png").stat().st_size > 1000


def test_report_check_exits_1_on_a_leak(demo):
    _, out = demo
    assert memleak("report", "--check", out).returncode == 1


def test_report_on_the_shipped_example_run():
    assert (EXAMPLE_RUN / "run.jsonl").stat().st_size < 200 * 1024  # it ships in the repository
    result = memleak_subprocess("report", "--check", EXAMPLE_RUN)
    assert result.returncode == 1, result.stderr  # the example leaks, on purpose
    assert "verdict: LEAK: cached_tensor at encoder.1.cache" in result.stdout


def test_a_run_cut_short_at_its_end_still_loads(demo, tmp_path):
    _, out = demo
    data = (out / "run.jsonl").read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) - 40])  # killed mid-record
    result = memleak("report", cut)
    assert result.returncode == 0, result.stderr
    assert "cut short" in result.stdout


def _header_line(demo) -> str:
    _, out = demo
    return (out / "run.jsonl").read_text().splitlines()[0]


BAD_INPUTS = {
    "empty file": (lambda d, p: p.write_text(""), "the file is empty"),
    "garbage": (lambda d, p: p.write_bytes(b"\x00\x01garbage that is not JSON\n"), "not a memleak run file"),
    "truncated line in the middle": (
        lambda d, p: p.write_text("\n".join([_header_line(d), '{"type":"step","step":0,"ti', '{"type":"step","step":1}'])
                                  + "\n"),
        "line 2 is not a valid record"),
    "unknown schema version": (
        lambda d, p: p.write_text(_header_line(d).replace('"schema":1', '"schema":99') + "\n"),
        "schema version 99 is not supported"),
    "a JSON file that is not a run": (lambda d, p: p.write_text('{"hello": "world"}\n'), "not a memleak"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_report_on_bad_input_prints_one_error_line(case, demo, tmp_path):
    write, problem = BAD_INPUTS[case]
    path = tmp_path / "run.jsonl"
    write(demo, path)
    result = memleak("report", path)
    assert_one_error_line(result, path, problem)


def test_report_on_a_folder_without_a_run(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    assert_one_error_line(memleak("report", tmp_path), tmp_path, "holds no run file")


def test_report_on_a_missing_path(tmp_path):
    path = tmp_path / "nope.jsonl"
    assert_one_error_line(memleak("report", path), path, "no such file")


def assert_one_error_line(result, path, problem):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"memleak: error: {path}: "), lines[0]
    assert problem in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_usage_errors_exit_2():
    result = memleak("report")
    assert result.returncode == 2 and "usage:" in result.stderr


def test_help_lists_every_subcommand():
    result = memleak("--help")
    assert result.returncode == 0
    for command in ("demo", "report", "run"):
        assert command in result.stdout


def test_console_script_is_installed():
    import shutil
    exe = shutil.which("memleak")
    if exe is None:
        pytest.skip("the memleak console script is not on PATH (pip install -e . puts it there)")
    result = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("memleak ")
