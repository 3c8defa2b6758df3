"""The segment, block and trace tables built from a snapshot's segments and device traces,
whatever the torch version that wrote them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .stacks import Stacks

#: Block states. PyTorch writes "active_pending_free" for a block freed by the
#: program but still in use by another stream; its docstrings call it "active_awaiting_free".
ALLOCATED = "active_allocated"
PENDING_FREE = ("active_pending_free", "active_awaiting_free")
INACTIVE = "inactive"

#: Trace actions (TraceEntry.action). Unknown actions from newer versions are kept as they are.
ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
)

#: The small pool serves requests < 1 MiB from 2 MiB segments; large-pool segments are bigger.
_SMALL_SEGMENT = 2 << 20

SEGMENT_COLUMNS = [
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "is_expandable",
    "n_blocks",
]
BLOCK_COLUMNS = [
    "device",
    "segment_address",
    "segment_type",
    "address",
    "size",
    "requested_size",
    "state",
    "frames",
    "stack",
]
TRACE_COLUMNS = ["device", "action", "addr", "size", "stream", "time_us", "device_free", "frames", "stack"]


def _ints(values: list) -> Any:
    """int64, or nullable Int64 when some entries lack the field (older layouts, OOM entries)."""
    if any(v is None for v in values):
        return pd.array(values, dtype="Int64")
    return np.array(values, dtype=np.int64)


def _block_frames_and_request(b: dict) -> tuple[Any, int]:
    """What allocated a block and how many bytes were asked for: `frames`/`requested_size`
    since torch 2.1, else the first (current) `history` entry, else the block size
    (as torch.cuda._memory_viz does)."""
    if "frames" in b:
        return b["frames"], b.get("requested_size", b["size"])
    history = b.get("history")
    if history:
        return history[0].get("frames"), history[0].get("real_size", b["size"])
    return None, b.get("requested_size", b["size"])


_BLOCK_FIELDS = ("device", "segment_address", "segment_type", "address", "size", "requested_size", "state")


def segment_tables(segments: list[dict], stacks: Stacks) -> tuple[pd.DataFrame, pd.DataFrame]:
    seg_rows, block_rows, codes = [], [], []
    has_pool_id = any("segment_pool_id" in s for s in segments)
    for seg in segments:
        device, base, total = seg.get("device", 0), seg.get("address", 0) or 0, seg["total_size"]
        kind = seg.get("segment_type") or ("small" if total <= _SMALL_SEGMENT else "large")
        offset = base
        allocated = active = requested = 0
        for b in seg["blocks"]:
            size, state = b["size"], b["state"]
            frames, req = _block_frames_and_request(b)
            addr = b.get("address", offset)  # before 2.1 blocks are listed in address order without one
            offset = addr + size
            if state == ALLOCATED:
                allocated += size
            if state != INACTIVE:
                active += size
                requested += req
            block_rows.append((device, base, kind, addr, size, req, state))
            codes.append(stacks.codes(frames))
        row = {
            "device": device,
            "address": base,
            "total_size": total,
            "allocated_size": seg.get("allocated_size", allocated),
            "active_size": seg.get("active_size", active),
            "requested_size": seg.get("requested_size", requested),
            "stream": seg.get("stream", 0),
            "segment_type": kind,
            "is_expandable": bool(seg.get("is_expandable", False)),
            "n_blocks": len(seg["blocks"]),
        }
        if has_pool_id:
            row["segment_pool_id"] = tuple(seg["segment_pool_id"]) if "segment_pool_id" in seg else None
        seg_rows.append(row)
    seg_df = pd.DataFrame(seg_rows, columns=SEGMENT_COLUMNS + (["segment_pool_id"] if has_pool_id else []))
    columns = (
        dict(zip(_BLOCK_FIELDS, zip(*block_rows, strict=True), strict=True))
        if block_rows
        else dict.fromkeys(_BLOCK_FIELDS, ())
    )
    blocks = pd.DataFrame(
        {
            k: pd.Categorical(v) if k in ("segment_type", "state") else np.array(v, dtype=np.int64)
            for k, v in columns.items()
        }
    )
    blocks["frames"], blocks["stack"] = stacks.columns(codes)
    return seg_df, blocks[BLOCK_COLUMNS]


def trace_table(traces: list[list[dict]], stacks: Stacks) -> pd.DataFrame:
    entries = [e for dev in traces for e in dev]
    n = len(entries)
    frames, stack = stacks.columns(stacks.codes(e.get("frames")) for e in entries)
    return pd.DataFrame(
        {
            "device": np.repeat(np.arange(len(traces), dtype=np.int64), [len(d) for d in traces]),
            "action": pd.Categorical([e.get("action") for e in entries]),
            "addr": _ints([e.get("addr") for e in entries]),
            "size": np.fromiter((e.get("size", 0) for e in entries), dtype=np.int64, count=n),
            "stream": _ints([e.get("stream", 0) for e in entries]),
            "time_us": _ints([e.get("time_us") for e in entries]),
            "device_free": _ints([e.get("device_free") for e in entries]),
            "frames": frames,
            "stack": stack,
        },
        columns=TRACE_COLUMNS,
    )
