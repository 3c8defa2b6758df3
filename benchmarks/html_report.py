"""How long the HTML report takes to build, and how big it is, for a synthetic run of N steps.

    python benchmarks/html_report.py --steps 1000000

The run is made directly (allocated bytes growing with noise and one spike, a growing holder),
analysed once, then the page is built three times; the best build time is printed.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

import memleak
from memleak.run import Run

GIB = 1 << 30


def synthetic_run(n: int) -> Run:
    i = np.arange(n)
    alloc = 2e9 + 1000.0 * i + np.random.default_rng(0).normal(0, 1e6, n)
    alloc[n // 2 + 1] += 5e9
    steps = pd.DataFrame({"step": i, "time": 0.1 * (i + 1), "allocated_bytes": alloc,
                          "reserved_bytes": alloc + 3e8, "inactive_split_bytes": alloc % 1e8})
    holders = [{"step": s, "holders": [{"holder": "history", "bytes": 1000 * s, "count": s // 100, "nodes": 0}]}
               for s in range(0, n, max(1, n // 200))]
    return Run({"device": "cuda:0", "device_total_bytes": 80 * GIB}, steps, records={"holders": holders})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000)
    args = ap.parse_args()
    run = synthetic_run(args.steps)
    t0 = time.perf_counter()
    report = memleak.analyze(run)
    analyse = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        page = report.to_html()
        times.append(time.perf_counter() - t0)
    print(f"{args.steps:,} steps: analyse {analyse:.2f} s; page {len(page) / 1e6:.2f} MB, "
          f"built in {min(times):.2f} s (best of 3; the first {times[0]:.2f} s)")


if __name__ == "__main__":
    main()
