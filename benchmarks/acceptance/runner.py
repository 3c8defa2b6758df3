"""The acceptance run: parts in order, each with its time cap (also cut to what is left of the
whole run's budget), each in a process of its own on CUDA (a fresh allocator and CUDA context
per part; a crash or hang loses that part only), results.json rewritten after each."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .harness import REPO, Context, machine_facts, run_capped, skipped, write_json
from .presets import PRESETS

ENTRY = REPO / "benchmarks" / "gpu_acceptance.py"
#: (part, module, cap in seconds), in the order they run: the parts that record fixtures first.
PARTS = [
    ("allocator", "allocator", 60),
    ("fragmentation", "fragmentation", 100),
    ("oom", "oom", 60),
    ("snapshot", "snapshots", 100),
    ("cuda_tests", "cuda_tests", 120),
    ("scenarios", "scenarios", 180),
    ("headroom", "headroom", 60),
    ("overhead", "overhead", 150),  # last: a compile that runs long still leaves its eager figures
    ("fixtures", "fixtures", 30),
]
#: Seconds of the budget kept for the fixtures part, which reads what the others wrote.
FIXTURES_RESERVE = 20
#: Seconds an isolated part's process gets past its cap (its own alarm stops it at the cap) before it is killed.
GRACE_S = 30.0


def part_function(name: str):
    module = dict((n, m) for n, m, _ in PARTS)[name]
    return importlib.import_module(f"{__package__}.{module}").run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu_acceptance.py", description="memleak's GPU acceptance run (docs/gpu.md)")
    ap.add_argument("out", type=Path, help="folder for results.json and the fixtures (tests/data/gpu/ inside it)")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU, small sizes; CUDA-only parts are skipped")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="sizes (default: cuda, or dry with --dry-run)")
    ap.add_argument("--parts", help="comma-separated parts to run (default: all): " + ",".join(n for n, _, _ in PARTS))
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run (default: %(default)s)")
    iso = ap.add_mutually_exclusive_group()
    iso.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        default=None,
        help="each part in a process of its own (the default on CUDA)",
    )
    iso.add_argument("--in-process", dest="isolate", action="store_false", help="every part in this process")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # run one part (started by the parent)
    ap.add_argument("--cap", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = [n for n, _, _ in PARTS]
    args.selected = names if not args.parts else [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in args.selected if p not in names]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(names)}")
    args.preset = args.preset or ("dry" if args.dry_run else "cuda")
    return args


def make_context(args: argparse.Namespace, name: str, cuda: bool) -> Context:
    return Context(out=args.out, cuda=cuda, dry_run=args.dry_run, sizes=PRESETS[args.preset].get(name, {}))


def run_child(args: argparse.Namespace, cuda: bool) -> int:
    """The child's side of --isolate: one part, its result as parts/NAME.json."""
    result = run_capped(part_function(args.child), make_context(args, args.child, cuda), args.cap)
    write_json(args.out / "parts" / f"{args.child}.json", result)
    return 0


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run_isolated(args: argparse.Namespace, name: str, cap: float) -> dict[str, Any]:
    """Run one part in a new process (and process group, so its own workers go with it)."""
    cmd = [sys.executable, str(ENTRY), str(args.out), "--child", name, "--preset", args.preset, "--cap", str(cap)]
    cmd += ["--dry-run"] if args.dry_run else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    log, result_file = args.out / "logs" / f"{name}.log", args.out / "parts" / f"{name}.json"
    log.parent.mkdir(parents=True, exist_ok=True)
    result_file.unlink(missing_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=cap + GRACE_S)
        except subprocess.TimeoutExpired:
            rc = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a hung part, or workers it left behind
        except ProcessLookupError:
            pass
        proc.wait()
    if result_file.is_file():
        result = json.loads(result_file.read_text())
    elif rc is None:
        result = {"status": "timeout", "summary": f"killed after {cap + GRACE_S:.0f} s", "log_tail": _tail(log)}
    else:
        result = {
            "status": "error",
            "summary": f"the part's process ended (rc {rc}) without a result",
            "log_tail": _tail(log),
        }
    result.setdefault("seconds", round(time.perf_counter() - t0, 2))
    result["log"] = str(log.relative_to(args.out))
    return result


def _line(name: str, result: dict) -> str:
    return f"{name:13} {result['status'][:24]:24} {result.get('seconds', 0):6.1f}s  {result.get('summary', '')}"[:400]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run  # is_available() creates no CUDA context
    if not cuda:
        torch.set_num_threads(1)  # CPU timings on a shared machine: one thread contends least
    if args.child:
        return run_child(args, cuda)
    if not cuda and not args.dry_run:
        print("gpu_acceptance.py: error: no CUDA device here; --dry-run runs the CPU side", file=sys.stderr)
        return 2
    isolate = cuda if args.isolate is None else args.isolate
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.out / "work", ignore_errors=True)  # scratch of an earlier run into the same folder
    results: dict[str, Any] = {
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "dry_run": args.dry_run,
        "preset": args.preset,
        "isolated": isolate,
        "budget_s": args.budget,
        "parts": {},
    }
    deadline = time.monotonic() + args.budget
    for name, _, cap in PARTS:
        if name not in args.selected:
            continue
        left = deadline - time.monotonic() - (0 if name == "fixtures" else FIXTURES_RESERVE)
        if left < 5:
            result = skipped("out of time: the run's budget is spent")
        elif isolate:
            result = run_isolated(args, name, min(cap, left))
        else:
            result = run_capped(part_function(name), make_context(args, name, cuda), min(cap, left))
        results["parts"][name] = result
        write_json(args.out / "results.json", results)
        print(_line(name, result), flush=True)
    results["finished_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json(args.out / "results.json", results)
    bad = [n for n, r in results["parts"].items() if not (r["status"] == "pass" or r["status"].startswith("skipped"))]
    print(f"results: {args.out / 'results.json'}; " + (f"not passed: {', '.join(bad)}" if bad else "every part passed"))
    return 1 if bad else 0
