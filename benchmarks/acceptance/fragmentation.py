"""Part "fragmentation": real fragmentation on a real allocator. Each workload runs in a fresh
process per allocator setting (frag_worker.py): variable-length batches with the default
allocator (kept as the "fragmenting" fixture) and with expandable_segments:True, the setting
memleak's finding proposes measured in its own process, and an oversize block split with and
without max_split_size_mb."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from .harness import REPO, SKIPPED_NO_CUDA, Checks, Context, fixture_meta, skipped

MiB = 1 << 20
EXPANDABLE = "expandable_segments:True"


def proposed_setting(fix: str | None) -> str | None:
    """The PYTORCH_CUDA_ALLOC_CONF value a finding's fix proposes, if any."""
    m = re.search(r"PYTORCH_CUDA_ALLOC_CONF=([^\s()]+)", fix or "")
    return m.group(1).rstrip(".,;") if m else None


def worker(ctx: Context, case: str, conf: str, folder, steps: int) -> dict[str, Any]:
    """Run one case in a fresh process with PYTORCH_CUDA_ALLOC_CONF=`conf`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTORCH_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    cmd = [sys.executable, "-m", "benchmarks.acceptance.frag_worker", case, str(folder), str(steps)]
    timeout = max(5.0, min(ctx.sizes["worker_timeout"], ctx.time_left() - 2))
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "case": case, "conf": conf}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"rc {done.returncode}", "stderr_tail": done.stderr[-3000:], "case": case, "conf": conf}
    return json.loads(lines[-1])


def _measure_all(ctx: Context) -> dict[str, dict]:
    steps, work = ctx.sizes["steps"], ctx.work_dir("fragmentation")
    runs: dict[str, dict] = {}
    runs["growing default"] = worker(ctx, "growing", "", ctx.new_fixture_dir("fragmenting"), steps)
    ctx.partial.update(runs)
    runs[f"growing {EXPANDABLE}"] = worker(ctx, "growing", EXPANDABLE, work / "growing-expandable", steps)
    proposed = proposed_setting(runs["growing default"].get("fix"))
    if proposed and proposed != EXPANDABLE:
        runs[f"growing {proposed}"] = worker(ctx, "growing", proposed, work / "growing-proposed", steps)
    ctx.partial.update(runs)
    runs["random default"] = worker(ctx, "random", "", work / "random-default", steps)
    runs[f"random {EXPANDABLE}"] = worker(ctx, "random", EXPANDABLE, work / "random-expandable", steps)
    runs["split default"] = worker(ctx, "split", "", work / "split-default", 0)
    runs["split max_split_size_mb:128"] = worker(ctx, "split", "max_split_size_mb:128", work / "split-capped", 0)
    return runs


def _check_growing(runs: dict[str, dict], checks: Checks) -> str | None:
    d = runs["growing default"]
    if "error" in d:
        checks.check("growing default ran", False, **d)
        return None
    flat = d["allocated_max"] - d["allocated_min"] <= 64 * MiB
    grew = d["reserved_end"] - d["reserved_at_tenth"] >= 256 * MiB
    checks.check(
        "default: live memory flat at step ends",
        flat,
        allocated_min=d["allocated_min"],
        allocated_max=d["allocated_max"],
    )
    checks.check(
        "default: reserve grows", grew, reserved_at_tenth=d["reserved_at_tenth"], reserved_end=d["reserved_end"]
    )
    checks.check("default: fragmentation finding", "fragmentation" in d["findings"], findings=d["findings"])
    proposed = proposed_setting(d.get("fix"))
    checks.check("the finding proposes an allocator setting", proposed is not None, fix=d.get("fix"))
    if proposed is not None:
        with_setting = runs.get(f"growing {proposed}", {})
        end = with_setting.get("reserved_end")
        checks.check(
            f"{proposed} reduces the reserve",
            end is not None and end <= 0.8 * d["reserved_end"],
            reserved_default=d["reserved_end"],
            reserved_with_setting=end,
        )
    return proposed


def _check_split(runs: dict[str, dict], checks: Checks) -> None:
    d, c = runs["split default"], runs["split max_split_size_mb:128"]
    if "error" in d or "error" in c:
        checks.check("split cases ran", False, default=d, capped=c)
        return
    checks.check(
        "split: free memory stranded in the split segment",
        d["inactive_split_end"] >= 256 * MiB,
        inactive_split=d["inactive_split_end"],
    )
    checks.check(
        "split: snapshot tables == memory_stats",
        (d["snapshot_reserved"], d["snapshot_allocated"], d["snapshot_inactive_split"])
        == (d["reserved_end"], d["allocated_end"], d["inactive_split_end"]),
    )
    checks.check(
        "split: max_split_size_mb:128 releases it",
        c["reserved_end"] < d["reserved_end"] and c["inactive_split_end"] < d["inactive_split_end"],
        reserved=(d["reserved_end"], c["reserved_end"]),
        split=(d["inactive_split_end"], c["inactive_split_end"]),
    )


def run(ctx: Context) -> dict[str, Any]:
    if not ctx.cuda:
        return skipped(SKIPPED_NO_CUDA, reason="fragmentation is the CUDA caching allocator's; the CPU has none")
    runs = _measure_all(ctx)
    fixture_meta(
        ctx.fixture_dir("fragmenting"),
        "variable-length batches whose lengths drift upward, default "
        "allocator, level counters: reserve grows while live memory stays flat",
        steps=ctx.sizes["steps"],
        case="growing",
        batch=8,
        dim=1024,
    )
    checks = Checks()
    proposed = _check_growing(runs, checks)
    _check_split(runs, checks)
    ends = {k: round(v.get("reserved_end", 0) / MiB) for k, v in runs.items()}
    return checks.result(f"reserved MiB at the end: {ends}; proposed {proposed}", runs=runs, proposed=proposed)
