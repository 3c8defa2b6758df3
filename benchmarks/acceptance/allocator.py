"""Part "allocator": memleak's allocator and NVML probes against torch.cuda.memory_stats()
and NVML read directly, every step, on a clean loop and on a leaking one (both kept as
fixtures); alloc retries and OOM counts made to happen; the NVML gap named (CUDA context,
kernels and library handles loaded on first use).

The tracker samples at ``tracker.step()``; the part reads memory_stats and NVML right
after it, with no CUDA work in between, so every column must match exactly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .harness import SKIPPED_NO_CUDA, Checks, Context, fixture_meta, skipped, stat_keys, write_stats

MiB = 1 << 20


class Nvml:
    """This process's device memory as NVML counts it (None where the driver hides pids)."""

    def __init__(self, index: int):
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def process_bytes(self) -> int | None:
        for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return None

    def close(self) -> None:
        self.nvml.nvmlShutdown()


def _model(torch, width: int, dev):
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).to(dev)


def record_series(folder: Path, dev, sizes: dict, leak_bytes: int, nvml: Nvml | None) -> list[dict]:
    """A tracked training loop (level counters) writing its run into `folder`; returns the
    memory_stats (and NVML, mem_get_info) read right after each tracker.step()."""
    import torch

    import memleak

    model = _model(torch, sizes["width"], dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    keep, raw = [], []
    # no optimizer=: its step() would end the iteration before the leak's allocation
    with memleak.track(model, out=folder, level="counters") as tracker:
        for _ in range(sizes["steps"]):
            x = torch.randn(sizes["batch"], sizes["width"], device=dev)
            loss = model(x).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if leak_bytes:
                keep.append(torch.empty(leak_bytes, dtype=torch.uint8, device=dev))  # the leak
            torch.cuda.synchronize(dev)
            tracker.step()
            free, total = torch.cuda.mem_get_info(dev)
            raw.append(
                {
                    "stats": stat_keys(torch.cuda.memory_stats(dev)),
                    "free": free,
                    "total": total,
                    "nvml_process_bytes": nvml.process_bytes() if nvml else None,
                }
            )
    write_stats(folder, [row["stats"] for row in raw])
    del keep
    torch.cuda.empty_cache()
    return raw


def compare_columns(run, raw: list[dict], checks: Checks, tag: str) -> None:
    """Every allocator column of the run equals memory_stats at the same step; NVML and
    mem_get_info equal the probe's readings."""
    from memleak.probes.allocator import STAT_COLUMNS

    steps = run.steps
    checks.check(f"{tag}: one row per step", len(steps) == len(raw), rows=len(steps), reads=len(raw))
    n = min(len(steps), len(raw))
    for key, col in STAT_COLUMNS.items():
        got = steps[col].tolist()[:n] if col in steps else []
        want = [r["stats"].get(key) for r in raw[:n]]
        bad = [i for i in range(n) if i >= len(got) or got[i] != want[i]]
        checks.check(f"{tag}: {col} == memory_stats['{key}']", not bad, mismatched_steps=bad[:10])
    checks.check(
        f"{tag}: the driver's free memory is not read each step (cudaMemGetInfo can wait on the device)",
        "device_free_bytes" not in steps,
    )
    nv = [r["nvml_process_bytes"] for r in raw[:n]]
    if "nvml_process_bytes" in steps and all(v is not None for v in nv):
        col = steps["nvml_process_bytes"].tolist()[:n]
        read = [i for i in range(n) if col[i] == col[i]]  # NVML is read on a time budget: not every step
        bad = [i for i in read if int(col[i]) != nv[i]]
        checks.check(f"{tag}: nvml_process_bytes == NVML", read and not bad, reads=len(read), mismatched_steps=bad[:10])
    else:
        checks.items[f"{tag}: nvml_process_bytes"] = {"ok": True, "note": "NVML lists no pid of this process here"}


def retries_and_oom(folder: Path, dev) -> dict[str, Any]:
    """A short tracked run in which the allocator must flush its cache and retry, then raises
    an OOM that is caught: the run's num_alloc_retries and num_ooms columns must show both."""
    import torch

    import memleak

    total = torch.cuda.get_device_properties(dev).total_memory
    raw = []
    with memleak.track(out=folder, level="counters", device=dev) as tracker:
        allowed = torch.cuda.memory_reserved(dev) + 2048 * MiB
        torch.cuda.set_per_process_memory_fraction(allowed / total, dev)
        try:
            blocks = [torch.empty(512 * MiB, dtype=torch.uint8, device=dev) for _ in range(3)]
            del blocks  # 1.5 GiB cached in three 512 MiB segments
            tracker.step()
            raw.append(stat_keys(torch.cuda.memory_stats(dev)))
            big = torch.empty(1024 * MiB, dtype=torch.uint8, device=dev)  # fits only once the cache is flushed
            tracker.step()
            raw.append(stat_keys(torch.cuda.memory_stats(dev)))
            try:
                torch.empty(4 * allowed, dtype=torch.uint8, device=dev)
            except torch.OutOfMemoryError:
                pass
            tracker.step()
            raw.append(stat_keys(torch.cuda.memory_stats(dev)))
            del big
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, dev)
    torch.cuda.empty_cache()
    return {"run": memleak.load(folder), "raw": raw}


def nvml_gap(nvml: Nvml | None, dev, context_bytes: int | None, runs: dict) -> dict[str, Any]:
    """The gap between NVML's count for this process and the allocator's reserve, named."""
    steps = runs["clean"].steps
    if nvml is None or context_bytes is None or "nvml_process_bytes" not in steps:
        return {"available": False, "why": "NVML lists no pid of this process (a container hides host pids)"}
    # the steps NVML was read at (its time budget leaves the others null)
    gap = (steps["nvml_process_bytes"] - steps["reserved_bytes"]).astype(float).dropna()
    if gap.empty:
        return {"available": False, "why": "NVML was read at no step"}
    late = gap.iloc[len(gap) // 3 :]
    return {
        "available": True,
        "cuda_context_bytes": context_bytes,
        "gap_end_bytes": int(gap.iloc[-1]),
        "kernels_and_library_handles_bytes": int(gap.iloc[-1] - context_bytes),
        "gap_spread_after_warmup_bytes": int(late.max() - late.min()),
        "named": "CUDA context (measured before any allocation) + kernels and cuBLAS/cuDNN handles loaded on "
        "first use (the rest of the gap)",
    }


def _context_bytes(torch, dev, nvml: Nvml | None) -> int | None:
    torch.cuda.set_device(dev)
    torch.cuda.synchronize(dev)  # the context exists, nothing is allocated yet
    return nvml.process_bytes() if nvml else None


def _open_nvml(dev) -> Nvml | None:
    try:
        nvml = Nvml(dev.index)
    except Exception:
        return None
    return nvml


def _check_retries(ro: dict[str, Any], checks: Checks) -> None:
    """The retry run's counters: as memory_stats has them, one retry or more, one OOM."""
    steps = ro["run"].steps
    checks.check(
        "retries column == memory_stats",
        steps["num_alloc_retries"].tolist() == [r["num_alloc_retries"] for r in ro["raw"]],
        column=steps["num_alloc_retries"].tolist(),
    )
    checks.check("a retry was counted", int(steps["num_alloc_retries"].iloc[-1]) >= 1)
    checks.check(
        "the OOM was counted",
        steps["num_ooms"].tolist()[-1] - steps["num_ooms"].tolist()[0] == 1,
        column=steps["num_ooms"].tolist(),
    )


def run(ctx: Context) -> dict[str, Any]:
    if not ctx.cuda:
        return skipped(SKIPPED_NO_CUDA, reason="memory_stats and NVML exist only on a CUDA device")
    import torch

    import memleak

    sizes, dev, checks = ctx.sizes, torch.device("cuda", 0), Checks()
    nvml = _open_nvml(dev)
    context_bytes = _context_bytes(torch, dev, nvml)
    runs, leak = {}, sizes["leak_bytes"]
    for name, leak_bytes in (("clean", 0), ("leak", leak)):
        folder = ctx.new_fixture_dir(name)
        raw = record_series(folder, dev, sizes, leak_bytes, nvml)
        fixture_meta(
            folder,
            f"a {name} training loop, level counters, memory_stats read after each step",
            steps=sizes["steps"],
            width=sizes["width"],
            batch=sizes["batch"],
            leak_bytes_per_step=leak_bytes,
        )
        runs[name] = memleak.load(folder)
        compare_columns(runs[name], raw, checks, name)
        ctx.partial[name] = {"steps": len(raw)}
    leak_report, clean_report = memleak.analyze(runs["leak"]), memleak.analyze(runs["clean"])
    slope = getattr(leak_report.growth, "slope", None)
    checks.check("leak run: verdict leak", leak_report.verdict.value == "leak", verdict=leak_report.verdict.value)
    checks.check(
        "leak run: slope = leak per step",
        slope is not None and abs(slope - leak) <= 0.05 * leak,
        slope=slope,
        leak_bytes_per_step=leak,
    )
    checks.check("clean run: not a leak", clean_report.verdict.value != "leak", verdict=clean_report.verdict.value)
    ro = retries_and_oom(ctx.work_dir("allocator") / "retries", dev)
    _check_retries(ro, checks)
    gap = nvml_gap(nvml, dev, context_bytes, runs)
    if gap["available"]:  # the context is most of the gap, and the gap holds still once the loop runs
        checks.check("NVML gap holds the CUDA context", gap["gap_end_bytes"] >= 0.9 * gap["cuda_context_bytes"], **gap)
        checks.check("NVML gap steady after warm-up", gap["gap_spread_after_warmup_bytes"] <= 64 * MiB)
    if nvml is not None:
        nvml.close()
    findings = [f.kind.value for f in memleak.analyze(ro["run"]).findings]
    slope_text = "none" if slope is None else f"{slope / MiB:.2f} MiB/step"
    return checks.result(
        f"{len(checks.items)} checks; leak slope {slope_text}; NVML gap {gap.get('gap_end_bytes', 0) / MiB:.0f} MiB",
        nvml_gap=gap,
        retry_run_findings=findings,
        leak_top=repr(leak_report),
        clean_top=repr(clean_report),
    )
