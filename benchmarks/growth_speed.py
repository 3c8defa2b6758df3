"""How long the growth detector takes on long runs (the goal: 1,000,000 steps well under 2 s).

    python benchmarks/growth_speed.py                      # 1M steps
    python benchmarks/growth_speed.py --steps 10000 1000000

For each size and shape (a leak, flat noise, a sawtooth) prints the best of three
timings of `analyze_growth` on an in-memory Run, and what it concluded.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from memleak.detect.growth import analyze_growth
from memleak.run import Run

MiB = 1 << 20
GiB = 1 << 30


def series(shape: str, steps: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(steps)
    y = 18 * GiB + np.round(rng.normal(0, 4 * MiB, steps) / 512) * 512  # allocator values: 512-byte multiples
    if shape == "leak":
        y += 40 * 1024 * t
    elif shape == "sawtooth":
        y += 2 * GiB * (t % 4 > 0)
    return y


def best_of(run: Run, repeat: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = analyze_growth(run)
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1_000_000])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    meta = {"device": "cuda:0", "device_total_bytes": 80 * GiB}
    for steps in args.steps:
        for shape in ("leak", "flat", "sawtooth"):
            frame = pd.DataFrame({"step": np.arange(steps), "duration": 0.1,
                                  "allocated_bytes": series(shape, steps, rng)})
            seconds, g = best_of(Run(meta, frame))
            print(f"{steps:>10,} steps  {shape:<8}  {seconds:6.3f} s  -> {g.shape}, leak={g.leak}, "
                  f"slope {g.slope:,.0f} B/step")


if __name__ == "__main__":
    main()
