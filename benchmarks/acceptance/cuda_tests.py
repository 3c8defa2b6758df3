"""Part "cuda_tests": the tests marked ``cuda`` (``python -m pytest -m cuda``), in a subprocess,
their outcomes read from pytest's JUnit XML."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .harness import REPO, SKIPPED_NO_CUDA, Context, skipped

PLUGIN = "memleak.integrations.pytest_plugin"


def marked_files(root: Path = REPO) -> list[str]:
    """The test files that hold a ``cuda``-marked test (collecting only these keeps the run short)."""
    mark = re.compile(r"^\s*@pytest\.mark\.cuda\b", re.M)
    return sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py") if mark.search(p.read_text()))


def command(files: list[str], junit: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfEs",
        f"--junitxml={junit}",
        *files,
    ]


def environment() -> dict[str, str]:
    """The repository first on the path; memleak's pytest plugin loaded by name where memleak is
    not installed (its entry point then does not exist), as the pytester tests need it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    installed = any(e.value == PLUGIN for e in importlib.metadata.entry_points(group="pytest11"))
    if not installed:
        env["PYTEST_PLUGINS"] = PLUGIN
    return env


def parse_junit(path: Path) -> list[dict[str, Any]]:
    """One row per test case: id, outcome (passed, failed, error, skipped), message, seconds."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or "") + "\n" + (node.text or "")[-2000:]
                break
        rows.append(
            {
                "test": f"{case.get('classname')}::{case.get('name')}",
                "outcome": outcome,
                "message": message.strip(),
                "seconds": float(case.get("time") or 0),
            }
        )
    return rows


def run(ctx: Context) -> dict[str, Any]:
    files = marked_files()
    if not ctx.cuda:
        return skipped(SKIPPED_NO_CUDA, reason="the cuda-marked tests skip without a GPU", files=files)
    junit = ctx.work_dir("cuda_tests") / "junit.xml"
    timeout = max(10.0, ctx.time_left() - 5)
    try:
        done = subprocess.run(
            command(files, junit), cwd=REPO, env=environment(), capture_output=True, text=True, timeout=timeout
        )
        rc, tail = done.returncode, (done.stdout + done.stderr)[-4000:]
    except subprocess.TimeoutExpired as e:
        rc, tail = None, f"timed out after {timeout:.0f} s: {str(e.stdout or '')[-3000:]}"
    rows = parse_junit(junit) if junit.is_file() else []
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "error", "skipped")}
    ok = rc == 0 and rows and counts["failed"] == counts["error"] == counts["skipped"] == 0
    return {
        "status": "pass" if ok else "fail",
        "summary": ", ".join(f"{v} {k}" for k, v in counts.items() if v) or f"no test ran (rc {rc})",
        "rc": rc,
        "counts": counts,
        "tests": rows,
        "output_tail": tail,
        "files": files,
    }
