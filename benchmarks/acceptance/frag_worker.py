"""One fragmentation workload in a process of its own (the allocator reads
PYTORCH_CUDA_ALLOC_CONF once, at its first allocation), started by the "fragmentation" part:

    PYTORCH_CUDA_ALLOC_CONF=... python -m benchmarks.acceptance.frag_worker CASE OUT_FOLDER STEPS

Cases:
- ``growing``: variable-length batches whose lengths drift upward (a length curriculum,
  a length-grouped sampler) with jitter: the live memory at each step's end is flat,
  each step needs slightly bigger activations than any block the cache holds;
- ``random``: lengths drawn uniformly from a fixed range;
- ``split``: an oversize block split: a 1 GiB block is freed, then 30 MiB pieces are
  carved out of it and every other one freed: free memory stranded in a segment that
  can be neither released nor used for bigger requests (unless max_split_size_mb stops
  the allocator from splitting big blocks).

Prints one JSON line: the reserve, live memory and counters at the end, and memleak's
findings about the run (or the snapshot, for ``split``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import memleak

from .harness import write_stats

MiB = 1 << 20
BATCH, DIM = 8, 1024


def _lengths(case: str, steps: int) -> list[int]:
    g = torch.Generator().manual_seed(0)
    jitter = torch.randint(0, 64, (steps,), generator=g).tolist()
    if case == "growing":
        return [256 + 24 * k + j for k, j in enumerate(jitter)]
    return torch.randint(128, 1536, (steps,), generator=g).tolist()


def variable_lengths(case: str, folder: Path, steps: int) -> dict[str, Any]:
    """A tracked training loop over batches of varying length; memory_stats kept each step."""
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    raw = []
    with memleak.track(model, out=folder, level="counters") as tracker:
        for length in _lengths(case, steps):
            x = torch.randn(BATCH, length, DIM, device=dev)
            loss = model(x).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            del x, loss
            tracker.step()
            raw.append({k: int(v) for k, v in torch.cuda.memory_stats(dev).items()})
    write_stats(folder, raw)
    report = memleak.analyze(memleak.load(folder))
    frag = [f for f in report.findings if f.kind.value == "fragmentation"]
    return {
        **_series(raw),
        "verdict": report.verdict.value,
        "findings": [f.kind.value for f in report.findings],
        "fragmentation_evidence": list(frag[0].evidence) if frag else [],
        "fix": frag[0].fix if frag else None,
    }


def _series(raw: list[dict]) -> dict[str, Any]:
    def col(key: str) -> list[int]:
        return [r.get(key, 0) for r in raw]

    allocated, reserved = col("allocated_bytes.all.current"), col("reserved_bytes.all.current")
    return {
        "reserved_end": reserved[-1],
        "reserved_at_tenth": reserved[len(reserved) // 10],
        "reserved_peak": max(reserved),
        "allocated_end": allocated[-1],
        "allocated_min": min(allocated),
        "allocated_max": max(allocated),
        "allocated_peak": max(col("allocated_bytes.all.peak")),
        "inactive_split_end": col("inactive_split_bytes.all.current")[-1],
        "segments_end": col("segment.all.current")[-1],
        "alloc_retries": col("num_alloc_retries")[-1],
    }


def oversize_split(folder: Path) -> dict[str, Any]:
    """The split case: stats after empty_cache, and memleak's reading of a snapshot taken then."""
    from memleak.snapshot import Snapshot

    dev = torch.device("cuda", 0)
    big = torch.empty(1024 * MiB, dtype=torch.uint8, device=dev)
    del big
    pieces = [torch.empty(30 * MiB, dtype=torch.uint8, device=dev) for _ in range(16)]
    keep = pieces[::2]
    del pieces
    torch.cuda.empty_cache()  # releases every segment that holds no live block
    stats = torch.cuda.memory_stats(dev)
    snap = Snapshot.from_data(torch.cuda.memory._snapshot())
    frag = snap.fragmentation()
    report = memleak.analyze(snap)
    out = {
        "reserved_end": int(stats["reserved_bytes.all.current"]),
        "allocated_end": int(stats["allocated_bytes.all.current"]),
        "inactive_split_end": int(stats["inactive_split_bytes.all.current"]),
        "oversize_segments": int(stats.get("oversize_segments.current", 0)),
        "snapshot_reserved": int(frag["reserved_bytes"].sum()),
        "snapshot_allocated": int(frag["allocated_bytes"].sum()),
        "snapshot_inactive_split": int(frag["inactive_split_bytes"].sum()),
        "findings": [f.kind.value for f in report.findings],
        "fix": next((f.fix for f in report.findings if f.kind.value == "fragmentation"), None),
    }
    del keep
    return out


def main(argv: list[str]) -> int:
    case, folder, steps = argv[0], Path(argv[1]), int(argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    result = oversize_split(folder) if case == "split" else variable_lengths(case, folder, steps)
    result["conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    result["expandable_segments"] = "expandable_segments:true" in result["conf"].lower().replace(" ", "")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
