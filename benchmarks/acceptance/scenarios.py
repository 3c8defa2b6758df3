"""Part "scenarios": the scenario corpus (tests/scenarios/) at each level on the device, next
to the same scenarios on the CPU: the verdicts must agree, and the suspect that names the
culprit must rank where it ranks on the CPU.

A scenario builds its model and batches on the default device, so ``with torch.device("cuda"):``
runs it on CUDA unchanged. Jobs (scenario, level, device) run in a pool of spawned worker
processes (one thread each), or one after another in this process with ``workers: 0``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from .harness import Checks, Context

BASELINE = "cpu"


def run_job(name: str, level: str, device: str, steps: int | None) -> dict[str, Any]:
    """One scenario at one level; `device` "cpu" is the baseline (no default device set),
    any other runs under ``with torch.device(device)``."""
    import torch

    from benchmarks.detection import rank_of, run_scenario

    torch.set_num_threads(1)
    where = torch.device(device) if device != BASELINE else contextlib.nullcontext()
    log = logging.getLogger("memleak")
    level_before = log.level
    log.setLevel(
        logging.ERROR
    )  # the live warnings of leaking scenarios; put back after (this may be the caller's process)
    try:
        with where:
            mod, report, secs = run_scenario(name, level, steps)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:400]}
    finally:
        log.setLevel(level_before)
    return {
        "verdict": report.verdict.value,
        "rank": rank_of(report, mod.EXPECTED["location"]),
        "top": [f"{s.kind.value}@{s.location}" for s in report.suspects[:3]],
        "tracked_device": report.run.meta.get("device"),
        "seconds": round(secs, 2),
    }


def _jobs(ctx: Context) -> list[tuple[str, str, str, int | None]]:
    from tests import scenarios

    sz = ctx.sizes
    names = sz["names"] or scenarios.names()
    device = "cuda" if ctx.cuda else "cpu:0"  # the dry run: CPU again, through the default-device path
    return [(n, lvl, dev, sz["steps"]) for lvl in sz["levels"] for n in names for dev in (BASELINE, device)]


def key(job: tuple) -> str:
    """A job's key in the rows: "scenario|level|device" (JSON keys are strings)."""
    return "|".join(map(str, job[:3]))


def _run_pool(ctx: Context, jobs: list, rows: dict) -> None:
    workers = ctx.sizes["workers"]
    if workers == 0:
        for job in jobs:
            rows[key(job)] = run_job(*job)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    futures = {pool.submit(run_job, *job): job for job in jobs}
    pending = set(futures)
    try:
        while pending and ctx.time_left() > 3:
            done, pending = wait(pending, timeout=min(10.0, ctx.time_left() - 3), return_when=FIRST_COMPLETED)
            for f in done:
                rows[key(futures[f])] = f.result() if f.exception() is None else {"error": repr(f.exception())}
    finally:
        for f in pending:
            f.cancel()
        procs = list(getattr(pool, "_processes", {}).values())
        for proc in procs:  # jobs still running when time is up
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        # Wait for the workers to end: each holds a CUDA context and its allocator's cache until
        # it does, and the next part (headroom's real OOMs) needs the device to itself.
        for proc in procs:
            proc.join(timeout=10)


def _expected(name: str) -> dict:
    from tests import scenarios

    return scenarios.load(name).EXPECTED


def summarize(rows: dict, levels, device: str) -> dict[str, Any]:
    """Per level: pairs run, verdicts agreeing, culprit ranks agreeing, and the device's recall,
    top-1 and false alarms; every disagreement listed."""
    out: dict[str, Any] = {}
    for lvl in levels:
        names = sorted({k.split("|")[0] for k in rows if k.split("|")[1] == lvl})
        s = {
            "pairs": 0,
            "verdict_agree": 0,
            "rank_agree": 0,
            "leaks": 0,
            "recall": 0,
            "top1": 0,
            "benign": 0,
            "false_alarms": 0,
            "mismatches": [],
            "errors": [],
            "missed": [],  # leaks found on the CPU, not on the device
            "ranked_lower": [],  # culprits the device ranks lower than the CPU (or not at all)
        }
        for name in names:
            cpu, dev = rows.get(f"{name}|{lvl}|{BASELINE}"), rows.get(f"{name}|{lvl}|{device}")
            if cpu is None or dev is None:
                continue
            if "error" in cpu or "error" in dev:
                s["errors"].append({"scenario": name, "cpu": cpu.get("error"), "device": dev.get("error")})
                continue
            s["pairs"] += 1
            s["verdict_agree"] += cpu["verdict"] == dev["verdict"]
            s["rank_agree"] += cpu["rank"] == dev["rank"]
            if cpu["verdict"] != dev["verdict"] or cpu["rank"] != dev["rank"]:
                s["mismatches"].append({"scenario": name, "cpu": cpu, "device": dev})
            if _expected(name)["verdict"] == "leak":
                s["leaks"] += 1
                s["recall"] += dev["verdict"] == "leak"
                s["top1"] += dev["rank"] == 1
                if cpu["verdict"] == "leak" and dev["verdict"] != "leak":
                    s["missed"].append(name)
                if _worse(dev["rank"], cpu["rank"]):
                    s["ranked_lower"].append(name)
            else:
                s["benign"] += 1
                s["false_alarms"] += dev["verdict"] == "leak"
        out[lvl] = s
    return out


def _worse(rank: int | None, baseline: int | None) -> bool:
    """Whether `rank` names the culprit lower than `baseline` does (None: not named at all)."""
    return baseline is not None and (rank is None or rank > baseline)


def run(ctx: Context) -> dict[str, Any]:
    jobs = _jobs(ctx)
    device = jobs[0][2] if jobs[0][2] != BASELINE else jobs[1][2]
    rows: dict = {}
    ctx.partial["rows"] = rows
    t0 = time.perf_counter()
    _run_pool(ctx, jobs, rows)
    levels = ctx.sizes["levels"]
    summary = summarize(rows, levels, device)
    checks = Checks()
    checks.check("every job ran", len(rows) == len(jobs), ran=len(rows), jobs=len(jobs))
    tracked = {r.get("tracked_device") for k, r in rows.items() if k.endswith(f"|{device}") and "error" not in r}
    checks.check(
        f"the tracker watched {device}",
        all(str(t).startswith(device.split(":")[0]) for t in tracked),
        tracked_devices=sorted(map(str, tracked)),
    )
    # The device may do better than the CPU (its allocator counts tensor bytes exactly, where the
    # CPU's heap is noisy): it must find every leak the CPU finds, rank every culprit at least as
    # high, and raise no false alarm.
    for lvl, s in summary.items():
        checks.check(
            f"{lvl}: every leak found on the CPU is found on {device}",
            s["pairs"] and not s["missed"] and not s["errors"],
            missed=s["missed"],
            errors=len(s["errors"]),
        )
        checks.check(
            f"{lvl}: culprits ranked as high as on the CPU", not s["ranked_lower"], ranked_lower=s["ranked_lower"]
        )
        checks.check(f"{lvl}: no false alarm on {device}", s["false_alarms"] == 0, false_alarms=s["false_alarms"])
    text = "; ".join(
        f"{lvl}: agree {s['verdict_agree']}/{s['pairs']}, on {device} recall {s['recall']}/{s['leaks']} "
        f"top-1 {s['top1']}/{s['leaks']} false alarms {s['false_alarms']}/{s['benign']}"
        for lvl, s in summary.items()
    )
    rows_out = [dict(zip(("scenario", "level", "device"), k.split("|"), strict=True), **r) for k, r in rows.items()]
    return checks.result(
        text, device=device, levels=summary, rows=rows_out, seconds_jobs=round(time.perf_counter() - t0, 1)
    )
