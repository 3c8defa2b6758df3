"""Part "snapshot": real pickles from torch.cuda.memory._dump_snapshot with allocation history,
at >= 100k trace entries: how long memleak takes to load and summarise them, and whether
``memleak.diff`` of a snapshot before and after tensors are kept names the line that kept
them. A small pair is kept as the "snapshot" fixture.

The dry run does the same on synthetic pickles (benchmarks/snapshot_load.py's layout).
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

from .harness import Checks, Context, fixture_meta

MiB = 1 << 20
LEAK_FUNCTION = "leak_tensors"
#: The two fixture pickles together stay under this (all fixtures under 5 MiB).
FIXTURE_BUDGET = 2 * MiB


def leak_tensors(torch, dev, count: int) -> list:
    """The tensors the diff must find: `count` blocks of about 1 MiB, kept. A loop, not a list
    comprehension: before Python 3.12 that is a frame of its own, named <listcomp>."""
    kept = []
    for i in range(count):
        kept.append(torch.empty(MiB + 4096 * i, dtype=torch.uint8, device=dev))
    return kept


def check_pair(before: Path, after: Path, leak_count: int, checks: Checks, tag: str) -> dict[str, Any]:
    """Load, summarise and diff two snapshot pickles; the diff's biggest row must be the kept tensors."""
    import memleak

    t0 = time.perf_counter()
    a = memleak.load(before)
    t1 = time.perf_counter()
    b = memleak.load(after)
    t2 = time.perf_counter()
    text = str(memleak.analyze(b))
    t3 = time.perf_counter()
    d = memleak.diff(a, b)
    t4 = time.perf_counter()
    top = d.iloc[0].to_dict() if len(d) else {}
    location = str(top.get("location", ""))
    checks.check(
        f"{tag}: diff names the line that kept the tensors",
        location.endswith(f":{LEAK_FUNCTION}") and top.get("count") == leak_count,
        top_location=location,
        top_count=top.get("count"),
    )
    checks.check(f"{tag}: summary printed", "reserved" in text, summary_head=text[:400])
    return {
        "bytes": [before.stat().st_size, after.stat().st_size],
        "trace_entries": [len(a.trace), len(b.trace)],
        "blocks": len(b.blocks),
        "segments": len(b.segments),
        "load_s": [round(t1 - t0, 3), round(t2 - t1, 3)],
        "analyze_and_text_s": round(t3 - t2, 3),
        "diff_s": round(t4 - t3, 3),
        "diff_rows": len(d),
    }


# ---------------------------------------------------------------- CUDA


def _train_steps(torch, model, opt, dev, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(32, 256, device=dev)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def record_pair(folder: Path, entries: int, stacks: str, steps: int, leak_count: int) -> dict[str, Any]:
    """Record history while training, dump a snapshot, keep tensors, train on, dump again."""
    import torch
    from torch import nn

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters())
    folder.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._record_memory_history(enabled="all", stacks=stacks, max_entries=entries)
    try:
        t0 = time.perf_counter()
        _train_steps(torch, model, opt, dev, steps)
        t1 = time.perf_counter()
        torch.cuda.memory._dump_snapshot(str(folder / "before.pickle"))
        t2 = time.perf_counter()
        kept = leak_tensors(torch, dev, leak_count)
        _train_steps(torch, model, opt, dev, 5)
        torch.cuda.memory._dump_snapshot(str(folder / "after.pickle"))
        reserved, allocated = torch.cuda.memory_reserved(dev), torch.cuda.memory_allocated(dev)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del kept
    torch.cuda.empty_cache()
    return {
        "record_s": round(t1 - t0, 2),
        "dump_s": round(t2 - t1, 2),
        "steps": steps,
        "stacks": stacks,
        "max_entries": entries,
        "reserved_at_dump": reserved,
        "allocated_at_dump": allocated,
    }


def _events_per_step(entries_probe: int = 20) -> float:
    """Allocator events one training step of record_pair's loop records."""
    import torch

    dev = torch.device("cuda", 0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
    ).to(dev)
    opt = torch.optim.Adam(model.parameters())
    _train_steps(torch, model, opt, dev, 3)  # optimizer state exists: steady steps only
    torch.cuda.memory._record_memory_history(enabled="all", stacks="python", max_entries=1_000_000)
    try:
        _train_steps(torch, model, opt, dev, entries_probe)
        n = len(torch.cuda.memory._snapshot()["device_traces"][0])
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return max(n / entries_probe, 1.0)


def _check_against_allocator(after: Path, rec: dict, checks: Checks, tag: str) -> None:
    import memleak

    frag = memleak.load(after).fragmentation()
    checks.check(
        f"{tag}: snapshot reserve == memory_reserved()",
        int(frag["reserved_bytes"].sum()) == rec["reserved_at_dump"],
        snapshot=int(frag["reserved_bytes"].sum()),
        stats=rec["reserved_at_dump"],
    )


def _cuda(ctx: Context, checks: Checks) -> dict[str, Any]:
    sz = ctx.sizes
    out = {"fixture": _fixture(ctx, checks)}  # first: a slow dump of the big ones must not cost it
    ctx.partial["fixture"] = out["fixture"]
    per_step = _events_per_step()
    steps = int(sz["entries"] * 1.1 / per_step) + 10
    for stacks in sz["stack_modes"]:
        folder = ctx.work_dir("snapshot") / stacks
        rec = record_pair(folder, sz["entries"], stacks, steps, sz["leak_count"])
        rec.update(check_pair(folder / "before.pickle", folder / "after.pickle", sz["leak_count"], checks, stacks))
        checks.check(
            f"{stacks}: >= 100k trace entries", min(rec["trace_entries"]) >= 100_000, entries=rec["trace_entries"]
        )
        _check_against_allocator(folder / "after.pickle", rec, checks, stacks)
        out[stacks] = ctx.partial[stacks] = rec
    return out


def _fixture(ctx: Context, checks: Checks) -> dict[str, Any]:
    """The smallest-but-real pair: C++ and Python stacks where they fit the budget."""
    folder = ctx.new_fixture_dir("snapshot")
    for stacks, entries in ctx.sizes["fixture_tries"]:
        rec = record_pair(folder, entries, stacks, 40, ctx.sizes["leak_count"])
        size = sum((folder / n).stat().st_size for n in ("before.pickle", "after.pickle"))
        if size <= FIXTURE_BUDGET:
            break
    rec["bytes"] = size
    checks.check("fixture pair within its budget", size <= FIXTURE_BUDGET, bytes=size)
    fixture_meta(
        folder,
        "two snapshots with allocation history, before and after tensors are kept",
        leak_function=LEAK_FUNCTION,
        leak_count=ctx.sizes["leak_count"],
        **rec,
    )
    return rec


# ---------------------------------------------------------------- dry run


def _synthetic(ctx: Context, checks: Checks) -> dict[str, Any]:
    """The same checks on synthetic pickles: a big one shaped like a real recording, and the
    same with `leak_count` more live blocks from one site."""
    from benchmarks.snapshot_load import make_snapshot

    folder, n = ctx.work_dir("snapshot"), ctx.sizes["entries"]
    data = make_snapshot(n, n_segments=ctx.sizes["segments"])
    (folder / "before.pickle").write_bytes(pickle.dumps(data))
    site = [{"filename": str(Path(__file__)), "line": 24, "name": LEAK_FUNCTION}]
    count, addr = ctx.sizes["leak_count"], 0x7E0000000000
    blocks = [
        {
            "address": addr + i * 2 * MiB,
            "size": 2 * MiB,
            "requested_size": MiB + 4096 * i,
            "state": "active_allocated",
            "frames": site,
        }
        for i in range(count)
    ]
    data["segments"].append(
        {
            "device": 0,
            "address": addr,
            "total_size": 2 * MiB * count,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "is_expandable": False,
            "allocated_size": 2 * MiB * count,
            "active_size": 2 * MiB * count,
            "requested_size": 0,
            "frames": [],
            "blocks": blocks,
        }
    )
    (folder / "after.pickle").write_bytes(pickle.dumps(data))
    return {"synthetic": check_pair(folder / "before.pickle", folder / "after.pickle", count, checks, "synthetic")}


def run(ctx: Context) -> dict[str, Any]:
    checks = Checks()
    details = _cuda(ctx, checks) if ctx.cuda else _synthetic(ctx, checks)
    key = next(k for k in details if k != "fixture")
    first = details[key]
    return checks.result(
        f"{'real' if ctx.cuda else 'synthetic (no CUDA)'} {key}: {first['trace_entries'][-1]} trace entries, "
        f"{first['bytes'][-1] / MiB:.1f} MiB, load {first['load_s'][-1]} s, diff {first['diff_s']} s",
        **details,
    )
