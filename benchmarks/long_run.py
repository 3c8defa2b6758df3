"""Long runs: write a synthetic 1,000,000-step run through the real RunWriter, then time
`memleak.load` + `memleak.analyze` on it in a fresh process.

    python benchmarks/long_run.py                 # 1M steps
    python benchmarks/long_run.py --steps 250000 500000 1000000   # memory vs steps

Prints, for each size: seconds to write, bytes per step, seconds to load, to analyse
(wall, and CPU seconds of the process: on a shared machine the wall time also counts others' jobs),
and the peak RSS the load + analysis added (the peak, VmHWM, of a fresh process minus its
RSS after imports). The goal: <= 5 s load + analyse for 1M steps, <= 200 bytes a step.

    python benchmarks/long_run.py --tracked 1000000   # memleak's own memory over a 1M-step run at auto

With --tracked, a fresh process runs a real Tracker at level "auto" (a small model, one tiny
forward and backward per step, the run written to a file) for that many steps and prints
memleak's own memory: the process's RSS and the C heap after the first 10,000 steps and at the
end, and what the tracker holds in memory (the live check's rows). The goal: RSS grows by less
than 50 MiB over the run, and nothing memleak holds grows with the steps.

The synthetic run imitates a CUDA training loop with a slow leak at level "counters":
every allocator counter of `memory_stats`, the driver's free memory, NVML and the
host counters, with the noise and the 2 MiB / 20 MiB reserve growth of a real one.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MiB = 1 << 20
GiB = 1 << 30


HEADER = {"memleak_version": "bench", "device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3",
          "device_total_bytes": 80 * GiB, "level": "counters", "rank": 0, "world_size": 1,
          "probes": ["allocator", "nvml", "host"], "host_memory_bytes": 512 * GiB}


def synthetic_steps(steps: int, leak_per_step: int = 40 * 1024, seed: int = 0):
    """Yield the steps of a long CUDA training run with a slow leak: allocator, NVML and host
    counters with realistic noise (one source for long_run.py and run_format.py)."""
    rng = np.random.default_rng(seed)
    total = 80 * GiB
    context = 520 * MiB
    base = 18 * GiB
    activations = 9 * GiB
    jitter = rng.integers(-64, 65, size=steps) * 512
    dur = 0.25 + rng.gamma(4.0, 0.004, size=steps)
    heap_noise = rng.integers(0, 3, size=steps) * 4096
    rss_noise = rng.integers(0, 2, size=steps) * 4096
    now = 0.0
    reserved = 30 * GiB
    alloc_peak = reserved_peak = req_peak = 0
    heap, rss = 2 * GiB, 6 * GiB
    for i in range(steps):
        allocated = base + leak_per_step * i + int(jitter[i])
        requested = allocated - 3_000 - (i % 7) * 96
        active = allocated + (int(jitter[i]) & 0xFFF)
        peak_now = allocated + activations
        while peak_now > reserved - 256 * MiB:
            reserved += 20 * MiB
        alloc_peak = max(alloc_peak, peak_now)
        req_peak = max(req_peak, peak_now - 2_000)
        reserved_peak = max(reserved_peak, reserved)
        heap += int(heap_noise[i]) - 4096
        rss = max(rss, 6 * GiB + (int(rss_noise[i]) + i // 50_000) * 4096)
        now += float(dur[i])
        yield {
            "step": i, "time": round(now, 6), "duration": round(float(dur[i]), 6),
            "allocated_bytes": allocated, "reserved_bytes": reserved, "active_bytes": active,
            "inactive_split_bytes": reserved - active - 200 * MiB if i % 3 else 48 * MiB,
            "requested_bytes": requested, "allocated_peak_bytes": alloc_peak,
            "reserved_peak_bytes": reserved_peak, "requested_peak_bytes": req_peak,
            "num_alloc_retries": 0, "num_ooms": 0,
            "device_free_bytes": total - reserved - context, "device_total_bytes": total,
            "nvml_process_bytes": reserved + context, "nvml_device_used_bytes": reserved + context + 3 * MiB,
            "heap_bytes": heap, "rss_bytes": rss,
        }


def write_synthetic_run(path: Path, steps: int, leak_per_step: int = 40 * 1024, seed: int = 0) -> float:
    """Write `steps` steps through memleak's RunWriter; return the seconds it took."""
    from memleak.io import RunWriter

    series = synthetic_steps(steps, leak_per_step, seed)
    t0 = time.perf_counter()
    w = RunWriter(path, overwrite=True)  # --keep: replace the run an earlier benchmark left there
    w.header(HEADER)
    for values in series:
        w.step(values)
    w.close()
    return time.perf_counter() - t0


_CHILD = r"""
import json, resource, sys, time
import memleak, memleak.analysis, memleak.io, memleak.run, memleak.report, pandas, numpy
import memleak.detect, memleak.detect.growth
def rss(key="VmRSS"):  # VmHWM: the peak of this process (ru_maxrss would count the parent's, kept across exec)
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))
before = rss()
t0, c0 = time.perf_counter(), time.process_time()
run = memleak.load(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
report = memleak.analyze(run)
t2, c2 = time.perf_counter(), time.process_time()
peak = rss("VmHWM")
print(json.dumps({"load_s": t1 - t0, "analyze_s": t2 - t1, "cpu_s": c2 - c0, "rss_before": before, "peak_rss": peak,
                  "rows": len(run.steps), "verdict": report.verdict.value,
                  "top": report.suspects[0].location if report.suspects else None}))
"""


_TRACKED = r"""
import json, sys, tempfile, time
import torch
import memleak
from memleak.probes.host import heap_counter
def rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
torch.manual_seed(0)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4, 8)
steps, heap = int(sys.argv[1]), heap_counter()
marks = {0: (rss(), heap(), 0, 1)}  # before the tracker starts
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp, memleak.track(model, optimizer=opt, out=tmp, level="auto") as t:
    for i in range(steps):
        model(x).sum().backward()
        opt.step()  # ends the step
        opt.zero_grad()
        if i + 1 in (10_000, steps):
            marks[i + 1] = (rss(), heap(), len(t._live.series["step"]), t._live.stride)
    readers = [m for m in ("pandas", "scipy.stats") if m in sys.modules]  # before t.run() reads
    spans = t.run().detail_spans()
full = sum(b - a + 1 for a, b, level, _ in spans if level == "full")
print(json.dumps({"marks": marks, "seconds": time.perf_counter() - t0, "full_steps": full, "readers": readers,
                  "windows": sum(level == "full" for _, _, level, _ in spans)}))
"""


def tracked(steps: int) -> int:
    out = subprocess.run([sys.executable, "-c", _TRACKED, str(steps)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    (rss_, heap_, _, _), (rss0, heap0, rows0, stride0), (rss1, heap1, rows1, stride1) = (
        m["marks"][k] for k in sorted(m["marks"], key=int))
    print(f"{steps:,} steps at auto in {m['seconds']:.0f} s ({m['full_steps']:,} with full detail, in "
          f"{m['windows']} windows): memleak's own RSS +{(rss0 - rss_) / 2**20:.1f} MiB after 10,000 steps, "
          f"+{(rss1 - rss_) / 2**20:.1f} MiB at the end (C heap +{(heap1 - heap_) / 2**20:.2f} MiB); "
          f"live rows {rows0} (stride {stride0}) -> {rows1} (stride {stride1}); "
          f"imported while recording: {', '.join(m['readers']) or 'neither pandas nor scipy'}")
    return 0


def measure(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--keep", help="write the run file here instead of a temporary folder")
    ap.add_argument("--tracked", type=int, help="run a real tracker at level auto for this many steps instead")
    args = ap.parse_args(argv)
    if args.tracked:
        return tracked(args.tracked)
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            path = Path(args.keep or tmp) / f"long-{n}.jsonl"
            write_s = write_synthetic_run(path, n)
            size = path.stat().st_size
            m = measure(path)
            added = m["peak_rss"] - m["rss_before"]
            print(f"{n:>9,} steps: write {write_s:6.1f} s ({write_s / n * 1e6:.1f} us/step), "
                  f"{size / n:5.1f} bytes/step ({size / 2**20:.0f} MiB); "
                  f"load {m['load_s']:.2f} s + analyse {m['analyze_s']:.2f} s = {m['load_s'] + m['analyze_s']:.2f} s "
                  f"({m['cpu_s']:.2f} s CPU); "
                  f"peak RSS +{added / 2**20:.0f} MiB ({added / n:.0f} bytes/step); "
                  f"verdict {m['verdict']} ({m['top']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
