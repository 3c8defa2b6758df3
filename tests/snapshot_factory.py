"""Snapshot dicts built to the layouts torch.cuda.memory._dump_snapshot writes.

- `snapshot(...)`: torch >= 2.1 (blocks with address, requested_size, frames;
  trace entries with time_us; allocator_settings).
- `pre21(...)`: torch 1.13/2.0 (blocks with `history` instead; no time_us).
- `segment_list(...)`: a pickled torch.cuda.memory_snapshot() (segments only;
  blocks with size and state, as torch 1.x wrote them).

Segments are described as lists of blocks `(size, state, requested, frames)`;
addresses are laid out from the segment's address, as the allocator lists them.
Frame lists are innermost first and shared between entries, as torch shares them.
"""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

MiB = 1 << 20
GiB = 1 << 30
A, P, I = "active_allocated", "active_pending_free", "inactive"


def frame(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


def stack(user_file: str = "/home/u/train.py", line: int = 10, name: str = "forward") -> list[dict]:
    """A realistic stack, innermost first: C++ and torch frames above one user frame."""
    return [
        frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1234, "c10::cuda::CUDACachingAllocator::malloc"),
        frame("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward"),
        frame(user_file, line, name),
        frame("/usr/lib/python3.11/runpy.py", 88, "_run_code"),
    ]


def block(size: int, state: str = A, requested: int | None = None, frames: list | None = None) -> tuple:
    return (size, state, size if requested is None else requested, frames or [])


def segment(address: int, blocks: list[tuple], device: int = 0, stream: int = 0, kind: str | None = None,
            pool_id: tuple = (0, 0), expandable: bool = False) -> dict:
    """A torch >= 2.1 segment dict from (size, state, requested, frames) blocks."""
    out, addr = [], address
    for size, state, requested, frames in blocks:
        out.append({"address": addr, "size": size, "requested_size": requested, "state": state, "frames": frames})
        addr += size
    total = addr - address
    return {
        "device": device, "address": address, "total_size": total, "stream": stream,
        "segment_type": kind or ("small" if total <= 2 * MiB else "large"), "segment_pool_id": pool_id,
        "allocated_size": sum(b["size"] for b in out if b["state"] == A),
        "active_size": sum(b["size"] for b in out if b["state"] != I),
        "requested_size": sum(b["requested_size"] for b in out if b["state"] != I),
        "is_expandable": expandable, "frames": [], "blocks": out,
    }


def trace_entry(action: str, addr: int, size: int, frames: list | None = None, stream: int = 0,
                time_us: int = 0) -> dict:
    if action == "oom":  # an OOM carries the driver's free bytes in place of an address
        return {"action": action, "device_free": addr, "size": size, "stream": stream,
                "frames": frames or [], "time_us": time_us}
    return {"action": action, "addr": addr, "size": size, "stream": stream, "frames": frames or [],
            "time_us": time_us}


def snapshot(segments: list[dict], traces: list[list[dict]] | None = None,
             settings: dict | None = None) -> dict:
    """The torch >= 2.1 layout."""
    return {"segments": segments, "device_traces": traces if traces is not None else [[]],
            "allocator_settings": settings or {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": (1 << 64) - 1,
                                               "garbage_collection_threshold": 0.0, "expandable_segments": False}}


def pre21(current: dict) -> dict:
    """The torch 1.13/2.0 layout of a torch >= 2.1 snapshot dict: blocks keep size and
    state, and the allocation moves into `history`; no segment requested_size, no time_us."""
    segments = []
    for seg in current["segments"]:
        blocks = []
        for b in seg["blocks"]:
            old = {"size": b["size"], "state": b["state"]}
            if b["state"] != I:
                old["history"] = [{"addr": b["address"], "real_size": b["requested_size"], "frames": b["frames"]}]
            blocks.append(old)
        segments.append({k: v for k, v in seg.items()
                         if k not in ("requested_size", "is_expandable", "frames", "segment_pool_id", "blocks")}
                        | {"blocks": blocks})
    traces = [[{k: v for k, v in e.items() if k != "time_us"} for e in dev] for dev in current["device_traces"]]
    return {"segments": segments, "device_traces": traces}


def segment_list(current: dict) -> list[dict]:
    """A pickled torch.cuda.memory_snapshot() from torch 1.x: segments, blocks with size and state only."""
    return [{k: v for k, v in seg.items() if k in ("device", "address", "total_size", "allocated_size",
                                                  "active_size", "stream", "segment_type")}
            | {"blocks": [{"size": b["size"], "state": b["state"]} for b in seg["blocks"]]}
            for seg in current["segments"]]


def write(path: str | Path, obj: Any) -> Path:
    path = Path(path)
    with open(path, "wb") as fh:
        pickle.dump(obj, fh)
    return path


def fragmented(device: int = 0) -> dict:
    """A fragmented cache on one device (numbers checked by hand in tests/test_snapshot.py):

    - a 1 GiB large segment: 20 live 20 MiB blocks (requested 20 MiB - 512 B each)
      interleaved with 20 free 20 MiB holes, then a live 224 MiB block (requested 200 MiB);
    - a 256 MiB large segment, wholly free (releasable, so not "inactive split");
    - a 2 MiB small segment: one live 512 B block (requested 500 B), the rest free.
    """
    site_a, site_b = stack(line=10), stack("/home/u/model.py", 42, "attend")
    pieces = []
    for i in range(20):
        pieces.append(block(20 * MiB, A, 20 * MiB - 512, site_a if i % 2 else site_b))
        pieces.append(block(20 * MiB, I))
    pieces.append(block(224 * MiB, A, 200 * MiB, site_a))
    segs = [segment(0x7F0000000000, pieces, device=device),
            segment(0x7F1000000000, [block(256 * MiB, I)], device=device),
            segment(0x7F2000000000, [block(512, A, 500, site_a), block(2 * MiB - 512, I)], device=device)]
    return snapshot(segs)


def training_history(steps: int = 30, keep: Any = None, stride: int = MiB, step_us: int = 20_000) -> dict:
    """The snapshot a training loop leaves with history recorded: weights made before the loop;
    each step allocates three activations (freed at its end) and, where `keep(step)` is true, one
    tensor at train.py:57 that is never freed; the last step is still running (its activations
    live). Addresses come one `stride` apart, reused once freed, as a caching allocator does."""
    keep = keep or (lambda step: False)
    sites = {"weight": stack("/home/u/model.py", 12, "__init__"), "act": stack(line=40),
             "kept": stack(line=57, name="train_step")}
    base, free, top = 0x7F0000000000, [], 0
    live: dict[int, list] = {}
    trace: list[dict] = []
    clock = [1_000_000]

    def alloc(site: str) -> int:
        nonlocal top
        if free:
            a = free.pop()
        else:
            a, top = base + top * stride, top + 1
        live[a] = sites[site]
        trace.append(trace_entry("alloc", a, stride, sites[site], time_us=clock[0]))
        clock[0] += 50
        return a

    def release(a: int) -> None:
        for action in ("free_requested", "free_completed"):
            trace.append(trace_entry(action, a, stride, live[a], time_us=clock[0]))
        del live[a]
        free.append(a)

    for _ in range(4):
        alloc("weight")
    for step in range(steps):
        acts = [alloc("act") for _ in range(3)]
        if keep(step):
            alloc("kept")
        clock[0] += step_us
        if step < steps - 1:
            for a in acts:
                release(a)
    blocks = [block(stride, A if base + i * stride in live else I, frames=live.get(base + i * stride))
              for i in range(top)]
    return snapshot([segment(base, blocks)], [trace])
