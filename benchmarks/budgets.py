"""Are the budgets honest? Each budgeted probe's measured share of whole-loop time, beside its budget,
on the loop of `benchmarks/overhead.py` (CPU, one thread).

    python benchmarks/budgets.py [--levels modules full] [--steps 300] [--rounds 3]

A probe's cost is what it spends at step boundaries (its `sample`, timed here from outside it, the
first run included) plus what its hooks add inside the user's steps (each step that ran with the
probe's hooks in, minus the median of the hook-free steps around it in the same loop). Its share is
that cost over the tracked loop's whole time (start to close), in process CPU time; the table gives
the median over rounds, and the worst round.

- census (`census_budget`, 5 %): the live-tensor census, taken on the first step and then as the
  step time pays for it;
- tensors (`deep_budget`, 10 %): deep steps: creation-site tagging and saved-tensor hooks inside
  the step, the reference walk and survivor checks at its end;
- modules (`modules_budget`, 3 %): detail steps: per-module hooks inside the step, the module
  record, categories and (level modules) the attribute scan at its end;
- live check (0.5 %): the live leak check, on its own clock.

At level full a step may run with module hooks and tagging both in; its extra is split between the
two in proportion to the median extra of the steps that ran with one of them alone.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from overhead import make, train_step  # noqa: E402

import memleak  # noqa: E402
from memleak.probes.tagging import Tagging  # noqa: E402

BUDGETS = {"census": 0.05, "tensors": 0.10, "modules": 0.03, "live check": 0.005}
NEAR = 8
clock = time.process_time


def timed(probe, spent: dict[str, float]) -> None:
    """Time the probe's `sample` from outside it."""
    sample = probe.sample

    def wrapper(step, seconds):
        t0 = clock()
        try:
            return sample(step, seconds)
        finally:
            spent[probe.name] += clock() - t0

    probe.sample = wrapper


def hooks_in(tracker) -> frozenset[str]:
    """The probes whose hooks are in for the step that begins now."""
    on = set()
    for p in tracker._probes:
        if p.name == "modules" and p.handles:
            on.add("modules")
        if p.name == "tensors" and isinstance(p._mode, Tagging):
            on.add("tensors")
    return frozenset(on)


def block(model, opt, steps: int, level: str, out: Path) -> tuple[float, dict[str, float]]:
    """The tracked loop's CPU seconds, and each budgeted probe's CPU seconds in it."""
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 256, (16, 33), generator=g) for _ in range(8)]
    spent: dict[str, float] = defaultdict(float)
    t0 = clock()
    tracker = memleak.track(model, optimizer=opt, level=level, out=out, overwrite=True)
    tracker.start()
    for p in tracker._probes:
        timed(p, spent)
    body, on = [], []
    try:
        for i in range(steps):
            on.append(hooks_in(tracker))
            s = clock()
            tokens = data[i % len(data)]
            train_step(model, opt, tokens)
            body.append(clock() - s)
            tracker.step()
    finally:
        tracker.close()
    total = clock() - t0
    in_step = hook_costs(body, on)
    costs = {name: spent.get(name, 0.0) + in_step.get(name, 0.0) for name in ("census", "tensors", "modules")}
    costs["live check"] = tracker._live.seconds
    return total, costs


def hook_costs(body: list[float], on: list[frozenset[str]]) -> dict[str, float]:
    """Per probe, what its hooks added inside the steps (steps 1.. : step 0 ends inside optimizer.step)."""
    extra: dict[frozenset[str], list[float]] = defaultdict(list)
    for i in range(1, len(body)):
        if not on[i]:
            continue
        near = [body[j] for j in range(max(1, i - NEAR), min(len(body), i + NEAR + 1)) if not on[j]]
        if near:
            extra[on[i]].append(body[i] - statistics.median(near))
    costs: dict[str, float] = defaultdict(float)
    alone = {name: statistics.median(extra[frozenset([name])]) for name in ("modules", "tensors")
             if extra.get(frozenset([name]))}
    for key, xs in extra.items():
        weights = {name: max(alone.get(name, 1.0), 1e-9) for name in key}
        for name, w in weights.items():
            costs[name] += sum(xs) * w / sum(weights.values())
    return costs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", nargs="+", default=["modules", "full"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("memleak").setLevel(logging.ERROR)
    model, opt = make(torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        for level in args.levels:
            block(model, opt, 40, level, out)  # warm up
            shares: dict[str, list[float]] = defaultdict(list)
            for _ in range(args.rounds):
                total, costs = block(model, opt, args.steps, level, out)
                for name, c in costs.items():
                    shares[name].append(c / total)
            print(f"level {level}, {args.steps} steps, {args.rounds} rounds: share of whole-loop CPU time")
            for name, xs in shares.items():
                if not any(xs):
                    continue
                med, worst = statistics.median(xs), max(xs)
                verdict = "ok" if med <= BUDGETS[name] else "OVER BUDGET"
                print(f"  {name:11} {med:7.2%} (worst round {worst:6.2%})   budget {BUDGETS[name]:5.1%}  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
