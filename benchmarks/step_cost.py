"""What tracking costs per step, in microseconds, and what it costs once, on the loop of
`benchmarks/overhead.py` (CPU, one thread): memleak's own time, measured where it is spent.

    python benchmarks/step_cost.py [--levels counters modules full auto] [--steps 300] [--rounds 5]
                                   [--device cpu|cuda] [--parts]

On a shared 2-core machine the difference of two whole loops of 20 ms steps is noise of a few
hundred microseconds a step: too coarse for costs of tens. So the cost is measured in parts, in
process CPU time, each where memleak spends it:

- start, close: `tracker.start()` and `tracker.close()` themselves (ms);
- first: step 0 beyond the untracked loop's step 0, each over its own loop's median step (the first
  census at the fixed levels, first-use set-up) (ms);
- young: steps 1..32, boundaries and hooks summed as below (level auto's start-up: it runs them as
  level full does, or the first 8 where nothing survives or grows in them) (ms);
- boundary: `tracker.step()` itself (every probe's sample, the census, the reference walks, the
  record written), per step over the steady steps 33..end (us);
- hooks: what the probes' hooks and modes add inside the user's step: on each step that ran with
  hooks in (module hooks, the creation-site mode, saved-tensor hooks), its step minus the median of
  the hook-free steps around it in the same loop, summed and spread over the steady steps (us);
- steady: boundary + hooks, per step; `x`: 1 + steady / the untracked step.

- whole x: the whole loop's ratio these parts add up to: 1 + (start + first + young + steady x the
  steps after 32 + close) / (steps x the untracked step). On a shared machine two whole loops
  differ by more than memleak costs (`overhead.py` rounds spread by 10-25 % here); parts measured
  where memleak spends them do not.

`--parts` adds, per level, where the steady boundary goes: each probe's `sample`, the heap read,
the record written and the live check's bookkeeping, in microseconds a step over the steady
steps; "rest" is the boundary's remainder (the tracker's own bookkeeping, auto's screen and
checks). `--device cuda` runs the loop on the GPU (the loop reads its loss each step, so each
step waits for the device and the boundary starts on an idle GPU), timed in wall-clock time on
a machine with nothing else running, where the CPU's process time would count the wait.

Steps 1..32 (level auto runs up to 32 of them as level full does) are left out of the steady
figures: their cost is auto's start-up. Each figure is the median over rounds; the hook-free steps' own extra
(the always-on optimizer hooks, a few microseconds) is not measurable this way and not counted.
"""
from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from overhead import make, train_step  # noqa: E402

import memleak  # noqa: E402
from memleak.probes.tagging import Tagging  # noqa: E402

YOUNG = 32
NEAR = 8  # hook-free steps on each side that a hooked step is compared with
clock = time.process_time  # time.perf_counter with --device cuda (main)


def hooked(tracker) -> bool:
    """Whether a probe has hooks or a mode in for the step that begins now."""
    if tracker is None:
        return False
    return any(getattr(p, "handles", None) or isinstance(getattr(p, "_mode", None), Tagging) for p in tracker._probes)


def timed_parts(tracker, spent: dict[str, list[tuple[int, float]]]) -> None:
    """Time, per step, each probe's sample, the heap read, the record written and the live
    check's bookkeeping of a started tracker into `spent` (name -> [(step, seconds)])."""

    def wrap(obj, attr: str, name: str) -> None:
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            t = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                spent.setdefault(name, []).append((tracker.iterations, clock() - t))

        setattr(obj, attr, timed)

    for probe in tracker._probes:
        wrap(probe, "sample", f"probe {probe.name}")
    if tracker._heap_reads is not None:
        wrap(tracker._heap_reads, "begin", "heap read")
    wrap(tracker.sink, "step", "record written")
    wrap(tracker._live, "append", "live bookkeeping")


def block(model, opt, steps: int, level: str | None, out: Path, device=None, spent=None) -> dict:
    """Seconds (CPU, or wall on CUDA) of one loop's parts: start, each step's body and boundary,
    close; with `spent`, the boundary's parts (timed_parts)."""
    device = device or torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 256, (16, 33), generator=g).to(device) for _ in range(8)]
    tracker = memleak.track(model, optimizer=opt, level=level, out=out, overwrite=True) if level else None
    t0 = clock()
    if tracker is not None:
        tracker.start()
        if spent is not None:
            timed_parts(tracker, spent)
    t1 = clock()
    body, call, hook = [], [], []
    try:
        for i in range(steps):
            hook.append(hooked(tracker))
            s = clock()
            tokens = data[i % len(data)]
            train_step(model, opt, tokens)
            m = clock()
            if tracker is not None:
                tracker.step()
            call.append(clock() - m)
            body.append(m - s)
    finally:
        t2 = clock()
        if tracker is not None:
            tracker.close()
        t3 = clock()
    return {"start": t1 - t0, "close": t3 - t2, "body": body, "call": call, "hooked": hook}


def hook_seconds(body: list[float], hooked: list[bool], lo: int, hi: int | None = None) -> float:
    """Summed over steps lo..hi-1 that ran with hooks: the step minus the median of nearby hook-free
    steps (from lo on)."""
    total = 0.0
    for i in range(lo, len(body) if hi is None else hi):
        if not hooked[i]:
            continue
        near = [body[j] for j in range(max(lo, i - NEAR), min(len(body), i + NEAR + 1)) if not hooked[j]]
        if near:
            total += body[i] - statistics.median(near)
    return total


def parts(b: dict) -> dict[str, float]:
    n = len(b["body"]) - YOUNG - 1
    boundary = sum(b["call"][YOUNG + 1 :]) / n
    hooks = hook_seconds(b["body"], b["hooked"], YOUNG + 1) / n
    young = sum(b["call"][1 : YOUNG + 1]) + hook_seconds(b["body"], b["hooked"], 1, YOUNG + 1)
    return {"start": b["start"], "first": b["body"][0] + b["call"][0], "young": young, "boundary": boundary,
            "hooks": hooks, "steady": boundary + hooks, "close": b["close"],
            "hooked": sum(b["hooked"][YOUNG + 1 :]) / n}


def first_extra(b: dict) -> float:
    """How much longer a loop's step 0 (its boundary included) took than its median step."""
    return b["body"][0] + b["call"][0] - statistics.median(b["body"])


def once_and_steady(m: dict[str, float], steps: int) -> float:
    """Seconds memleak adds to a loop of `steps` steps: its one-off parts and its steady cost on
    the steps after the young ones."""
    return m["start"] + m["first"] + m["young"] + m["steady"] * (steps - YOUNG - 1) + m["close"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", nargs="+", default=["counters", "modules", "full", "auto"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    ap.add_argument("--parts", action="store_true", help="also where the steady boundary goes")
    args = ap.parse_args(argv)
    global clock
    device = torch.device(args.device)
    if device.type == "cuda":
        clock = time.perf_counter
    if args.steps < 2 * YOUNG:
        ap.error(f"--steps: at least {2 * YOUNG}")
    torch.set_num_threads(1)
    random.seed(0)
    logging.getLogger("memleak").setLevel(logging.ERROR)
    model, opt = make(device)
    levels = [None, *args.levels]
    got: dict = {lv: [] for lv in levels}
    spent: dict = {lv: [] for lv in levels}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        for lv in levels:  # warm up: first-use imports and caches
            block(model, opt, 2 * YOUNG, lv, out, device)
        for _ in range(args.rounds):
            order = list(levels)
            random.shuffle(order)
            for lv in order:
                parts_of = {} if args.parts and lv else None
                got[lv].append(block(model, opt, args.steps, lv, out, device, parts_of))
                spent[lv].append(parts_of)
    base = statistics.median(statistics.median(b["body"]) for b in got[None])
    what = "CPU" if device.type == "cpu" else "wall"
    print(f"{device.type}, {args.steps} steps a block, {args.rounds} rounds: untracked step {base * 1e6:.0f} us "
          f"{what} (median)")
    print(f"  {'level':9} {'start ms':>9} {'first ms':>9} {'young ms':>9} {'boundary us':>12} {'hooks us':>9}"
          f" {'steady us':>10}"
          f" {'close ms':>9} {'x':>6} {'whole x':>8} {'hooked':>7}")
    for lv in args.levels:
        rows = [parts(b) for b in got[lv]]
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        # step 0 ends inside optimizer.step() (it ends iterations until tracker.step() takes over).
        # Each step 0 is taken over its own loop's median step: two loops' speeds differ by 5-10 %
        # here, a few ms a step, as much as memleak's first step costs
        m["first"] = statistics.median(
            first_extra(b) - first_extra(u) for b, u in zip(got[lv], got[None], strict=True)
        )
        print(f"  {lv:9} {m['start'] * 1e3:9.1f} {m['first'] * 1e3:9.1f} {m['young'] * 1e3:9.1f} {m['boundary'] * 1e6:12.0f} "
              f"{m['hooks'] * 1e6:9.0f} {m['steady'] * 1e6:10.0f} {m['close'] * 1e3:9.1f} "
              f"{1 + m['steady'] / base:6.3f} {1 + once_and_steady(m, args.steps) / (args.steps * base):8.3f} "
              f"{m['hooked']:7.0%}")
    if args.parts:
        for lv in args.levels:
            print_parts(lv, spent[lv], got[lv], args.steps)
    return 0


def print_parts(level: str, rounds: list[dict], blocks: list[dict], steps: int) -> None:
    """Per part, its median over rounds of microseconds a steady step; then the boundary's rest."""
    n = steps - YOUNG - 1
    per: dict[str, list[float]] = {}
    for spent in rounds:
        for name, rows in spent.items():
            per.setdefault(name, []).append(sum(s for step, s in rows if step > YOUNG) / n)
    boundary = statistics.median(sum(b["call"][YOUNG + 1 :]) / n for b in blocks)
    named = {name: statistics.median(xs) for name, xs in per.items()}
    cells = [f"{name} {us * 1e6:.0f}" for name, us in sorted(named.items(), key=lambda kv: -kv[1])]
    rest = boundary - sum(named.values())
    print(f"  {level}: boundary {boundary * 1e6:.0f} us a step = " + ", ".join([*cells, f"rest {rest * 1e6:.0f}"]))


if __name__ == "__main__":
    raise SystemExit(main())
