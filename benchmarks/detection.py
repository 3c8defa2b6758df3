"""Detection quality over the scenario corpus (tests/scenarios/).

    python benchmarks/detection.py [--level full] [--steps N] [-v] [names...]
    python benchmarks/detection.py --level auto full      # both levels, side by side
    python benchmarks/detection.py --default-device cpu   # under a default-device context

Prints, per scenario and level, the verdict and the top suspects, then per level recall (leaks
found), the kind of the suspect that names the culprit, false alarms (benign cases called
leaks), and top-1 / top-3 location accuracy; at level auto also the steps that had full detail.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memleak  # noqa: E402
from tests import scenarios  # noqa: E402


def run_scenario(name: str, level: str = "full", steps: int | None = None):
    """Run one scenario; return (module, report, seconds)."""
    mod = scenarios.load(name)
    made = []

    def factory(model, **kw):
        t = memleak.track(model, level=level, **kw)
        made.append(t)
        return t

    t0 = time.perf_counter()
    if steps is None:
        mod.run(factory)
    else:
        mod.run(factory, steps=steps)
    seconds = time.perf_counter() - t0
    return mod, made[-1].report(), seconds


def rank_of(report, location: str | None) -> int | None:
    """1-based rank of the first suspect whose location contains `location`."""
    if not location:
        return None
    for i, s in enumerate(report.suspects, 1):
        if scenarios.names_location(location, s.location):
            return i
    return None


def detail_share(report) -> tuple[int, int]:
    """(steps with full detail, steps) of the report's run."""
    spans = report.run.detail_spans()
    full = sum(b - a + 1 for a, b, level, _ in spans if level == "full")
    return full, (spans[-1][1] + 1 if spans else 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--level", nargs="+", default=["full"], help="one level or several, each run on every scenario")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--default-device", help="run each scenario under `with torch.device(DEV)` (as the GPU run does)")
    args = ap.parse_args(argv)
    names = args.names or scenarios.names()
    where = torch.device(args.default_device) if args.default_device else contextlib.nullcontext()
    with where:
        totals = {level: corpus(names, level, args.steps, args.verbose) for level in args.level}
    if len(totals) > 1:
        print()
        for level, line in totals.items():
            print(f"{level:>9}: {line}")
    return 0


def corpus(names, level, steps, verbose) -> str:
    """Run every scenario at `level`, print one line each and the totals; the totals as one line."""
    print(f"level {level}:")
    leaks = found = top1 = top3 = kinds = benign = alarms = detail = total = 0
    for name in names:
        mod, report, secs = run_scenario(name, level, steps)
        full, n = detail_share(report)
        detail += full
        total += n
        exp = mod.EXPECTED
        r = rank_of(report, exp["location"])
        tops = "; ".join(f"{s.kind.value}@{s.location}({s.confidence:.2f}{',leak' if s.leak else ''})"
                         for s in report.suspects[:3])
        if exp["verdict"] == "leak":
            leaks += 1
            found += report.verdict.value == "leak"
            top1 += r == 1
            top3 += r is not None and r <= 3
            kinds += r is not None and report.suspects[r - 1].kind.value == exp["kind"]
            mark = "ok " if report.verdict.value == "leak" and r == 1 else ("top3" if r and r <= 3 else "MISS")
        else:
            benign += 1
            alarms += report.verdict.value == "leak"
            mark = "ok " if report.verdict.value != "leak" else "FALSE"
        print(f"{mark:5} {name:38} {report.verdict.value:12} rank={r} {secs:5.1f}s full {full:3}/{n:<3} {tops}",
              flush=True)
        if verbose:
            print(report)
    line = (f"recall {found}/{leaks}; top-1 location {top1}/{leaks}; top-3 location {top3}/{leaks}; "
            f"kind right {kinds}/{leaks}; false alarms {alarms}/{benign}; full detail on {detail}/{total} steps")
    print()
    print(f"leak scenarios: {leaks}; benign scenarios: {benign}")
    print(line)
    return line


if __name__ == "__main__":
    raise SystemExit(main())
