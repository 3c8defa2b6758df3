"""The segment, block and trace tables built from a snapshot's segments and device traces,
whatever the torch version that wrote them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..units import fmt_value
from .checks import int_column, text_column
from .layout import NotASnapshot
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
#: How each int column is checked (checks.int_column): sizes also for their total.
_SIZES = {"total_size", "allocated_size", "active_size", "requested_size", "size"}
_SEGMENT_INTS = ("device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream")


def _checked(values: Sequence[Any], field: str, what: str) -> Any:
    """One int column, checked (checks.int_column): `field` of each `what` ("block")."""
    return int_column(values, f"a {what}'s {field}", signed=field == "stream", summed=field in _SIZES)


def _segment_row(seg: dict, stacks: Stacks, block_rows: list, codes: list) -> dict[str, Any]:
    """One segment's row; its blocks' rows and stack codes appended to `block_rows` and `codes`."""
    device, base, total = seg.get("device", 0), seg.get("address", 0) or 0, seg["total_size"]
    kind = seg.get("segment_type") or ("small" if type(total) is int and total <= _SMALL_SEGMENT else "large")
    offset = base
    allocated = active = requested = 0
    for b in seg["blocks"]:
        size, state = b["size"], b["state"]
        frames, req = _block_frames_and_request(b)
        addr = b.get("address", offset)  # before 2.1 blocks are listed in address order without one
        if type(size) is not int or type(addr) is not int or type(req) is not int:
            fields = {"size": size, "address": addr, "requested_size": req}
            name, bad = next((f, v) for f, v in fields.items() if type(v) is not int)
            raise NotASnapshot(f"a block's {name} has the wrong type: {fmt_value(bad)}, not an integer")
        offset = addr + size
        if state == ALLOCATED:
            allocated += size
        if state != INACTIVE:
            active += size
            requested += req
        block_rows.append((device, base, kind, addr, size, req, state))
        codes.append(stacks.codes(frames))
    return {
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


def _pool_id(seg: dict) -> tuple | None:
    pool = seg.get("segment_pool_id")
    if pool is None:
        return None
    if not isinstance(pool, (tuple, list)) or len(pool) != 2:
        raise NotASnapshot(f"a segment's segment_pool_id is {fmt_value(pool)}, not a pair")
    return tuple(pool)


def segment_tables(segments: list[dict], stacks: Stacks) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The segment table and the block table, each field checked (checks.py)."""
    block_rows: list[tuple] = []
    codes: list[tuple[int, int]] = []
    rows = [_segment_row(seg, stacks, block_rows, codes) for seg in segments]
    seg_cols: dict[str, Any] = {k: _checked([r[k] for r in rows], k, "segment") for k in _SEGMENT_INTS}
    seg_cols["segment_type"] = text_column([r["segment_type"] for r in rows], "a segment's segment_type").astype(object)
    seg_cols["is_expandable"] = np.array([r["is_expandable"] for r in rows], dtype=bool)
    seg_cols["n_blocks"] = np.array([r["n_blocks"] for r in rows], dtype=np.int64)
    if any("segment_pool_id" in s for s in segments):
        seg_cols["segment_pool_id"] = [_pool_id(s) for s in segments]
    seg_df = pd.DataFrame(seg_cols, columns=[c for c in [*SEGMENT_COLUMNS, "segment_pool_id"] if c in seg_cols])
    columns = (
        dict(zip(_BLOCK_FIELDS, zip(*block_rows, strict=True), strict=True))
        if block_rows
        else dict.fromkeys(_BLOCK_FIELDS, ())
    )
    blocks = pd.DataFrame(
        {
            k: text_column(v, f"a block's {k}") if k in ("segment_type", "state") else _checked(v, k, "block")
            for k, v in columns.items()
        }
    )
    blocks["frames"], blocks["stack"] = stacks.columns(codes)
    return seg_df, blocks[BLOCK_COLUMNS]


def trace_table(traces: list[list[dict]], stacks: Stacks) -> pd.DataFrame:
    """The trace table, oldest first per device, each field checked (checks.py)."""
    entries = [e for dev in traces for e in dev]
    frames, stack = stacks.columns(stacks.codes(e.get("frames")) for e in entries)

    def ints(field: str, default: Any = None, signed: bool = False) -> Any:
        values = [e.get(field, default) for e in entries]
        return int_column(values, f"a trace entry's {field}", nullable=True, signed=signed)

    size = int_column([e.get("size", 0) for e in entries], "a trace entry's size")
    return pd.DataFrame(
        {
            "device": np.repeat(np.arange(len(traces), dtype=np.int64), [len(d) for d in traces]),
            "action": text_column([e.get("action") for e in entries], "a trace entry's action", nullable=True),
            "addr": ints("addr"),
            "size": size,
            "stream": ints("stream", 0, signed=True),
            "time_us": ints("time_us"),
            "device_free": ints("device_free"),
            "frames": frames,
            "stack": stack,
        },
        columns=TRACE_COLUMNS,
    )
