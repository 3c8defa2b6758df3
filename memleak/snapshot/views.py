"""The `Snapshot` (one snapshot's tables) and what is read from them: fragmentation per pool,
live bytes by site, OOMs, the allocator settings, and `diff` of two snapshots."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..units import fmt_bytes
from .checks import check_settings
from .layout import NotASnapshot, read_layout
from .stacks import NO_STACK, STACK_CHARS_PER_ROW, Stacks
from .tables import ALLOCATED, INACTIVE, PENDING_FREE, segment_tables, trace_table

FRAGMENTATION_COLUMNS = [
    "device",
    "pool",
    "segments",
    "reserved_bytes",
    "allocated_bytes",
    "requested_bytes",
    "pending_free_bytes",
    "free_bytes",
    "largest_free_bytes",
    "inactive_split_bytes",
    "external_fragmentation",
    "internal_fragmentation",
]


def parse_alloc_conf(text: str | None) -> dict[str, str]:
    """'expandable_segments:True,max_split_size_mb:128' -> {'expandable_segments': 'True', ...}."""
    conf = {}
    for item in str(text or "").split(","):
        key, _, value = item.partition(":")
        if key.strip():
            conf[key.strip().lower()] = value.strip()
    return conf


class Snapshot:
    """One PyTorch memory snapshot as tables.

    - ``segments``: one row per segment (cudaMalloc'd region).
    - ``blocks``: one row per block; ``frames`` is the top user frame
      ("file.py:line:function"), ``stack`` the whole stack, innermost first.
    - ``trace``: the allocator's recorded actions, oldest first per device
      (empty unless ``_record_memory_history`` was on).
    - ``allocator_settings``: the allocator configuration, when the snapshot has it.
    """

    def __init__(
        self,
        segments: pd.DataFrame,
        blocks: pd.DataFrame,
        trace: pd.DataFrame,
        allocator_settings: dict[str, Any] | None = None,
        path: str | None = None,
    ):
        self.segments = segments
        self.blocks = blocks
        self.trace = trace
        self.allocator_settings = allocator_settings or {}
        self.path = path

    @classmethod
    def from_data(cls, data: Any, path: str | None = None, max_rows: int | None = None) -> Snapshot:
        """Build from an unpickled snapshot (dict or list of segments). Data that is no snapshot,
        or holds a field of the wrong type or out of range, raises `NotASnapshot` (a
        `RunFileError` naming `path`, when given, and the field); with `max_rows`, so does
        data listing more segments, blocks and trace entries than that."""
        try:
            segments, traces, settings = read_layout(data, max_rows)
            stacks = Stacks(max_chars=None if max_rows is None else STACK_CHARS_PER_ROW * max_rows)
            seg_df, blocks = segment_tables(segments, stacks)
            return cls(seg_df, blocks, trace_table(traces, stacks), check_settings(settings), path)
        except NotASnapshot as e:
            raise NotASnapshot(e.problem, path) from None
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError, IndexError) as e:
            raise NotASnapshot(f"a field is missing or has the wrong type ({type(e).__name__}: {e})", path) from None

    # -------------------------------------------------------- analysis

    def fragmentation(self) -> pd.DataFrame:
        """Per device and pool ('large'/'small'): reserved, allocated, requested, free bytes,
        the largest free block, inactive split bytes (free pieces of segments that still
        hold live blocks: neither releasable nor usable by bigger requests), external
        fragmentation 1 - largest_free/free and internal fragmentation
        (allocated - requested)/allocated."""
        if self.segments.empty:
            return pd.DataFrame(columns=FRAGMENTATION_COLUMNS)
        keys = ["device", "segment_type"]
        seg = self.segments.groupby(keys, observed=True).agg(
            segments=("total_size", "size"), reserved_bytes=("total_size", "sum")
        )
        b = self.blocks
        split = b.groupby(["device", "segment_address"])["size"].transform("size") > 1
        state = b["state"].astype(object)
        parts = {
            "allocated_bytes": b["size"].where(state == ALLOCATED, 0),
            "requested_bytes": b["requested_size"].where(state == ALLOCATED, 0),
            "pending_free_bytes": b["size"].where(state.isin(PENDING_FREE), 0),
            "free_bytes": b["size"].where(state == INACTIVE, 0),
            "inactive_split_bytes": b["size"].where((state == INACTIVE) & split, 0),
        }
        sums = pd.DataFrame({**parts, "device": b["device"], "segment_type": b["segment_type"].astype(object)})
        out = seg.join(sums.groupby(keys).sum(), how="left")
        out["largest_free_bytes"] = sums.groupby(keys)["free_bytes"].max()
        out = out.fillna(0).astype(np.int64)
        free, allocated = out["free_bytes"], out["allocated_bytes"]
        out["external_fragmentation"] = np.where(free > 0, 1 - out["largest_free_bytes"] / free.where(free > 0, 1), 0.0)
        out["internal_fragmentation"] = np.where(
            allocated > 0, (allocated - out["requested_bytes"]) / allocated.where(allocated > 0, 1), 0.0
        )
        out = out.reset_index().rename(columns={"segment_type": "pool"})
        return out[FRAGMENTATION_COLUMNS]

    def live_by_site(self) -> pd.DataFrame:
        """Live (active_allocated) blocks grouped by top user frame, most bytes first."""
        return _by_site(self.blocks[self.blocks["state"].astype(object) == ALLOCATED])

    def ooms(self) -> pd.DataFrame:
        """The OOMs in the trace: device, size asked for, bytes the driver had free, stack."""
        t = self.trace
        return t.loc[t["action"].astype(object) == "oom", ["device", "size", "device_free", "frames", "stack"]]

    def alloc_conf(self) -> dict[str, str]:
        """The allocator settings in effect, as PYTORCH_CUDA_ALLOC_CONF keys (empty when unknown)."""
        s = self.allocator_settings
        conf = parse_alloc_conf(str(s.get("PYTORCH_CUDA_ALLOC_CONF") or ""))
        if s.get("expandable_segments"):
            conf.setdefault("expandable_segments", "True")
        if 0 < int(s.get("max_split_size") or 0) < (1 << 62):  # SIZE_MAX means "never split-limited"
            conf.setdefault("max_split_size_mb", str(int(s["max_split_size"]) >> 20))
        if float(s.get("garbage_collection_threshold") or 0) > 0:
            conf.setdefault("garbage_collection_threshold", str(s["garbage_collection_threshold"]))
        return conf

    def __repr__(self) -> str:
        reserved = int(self.segments["total_size"].sum()) if not self.segments.empty else 0
        return (
            f"<memleak.Snapshot {self.path or '(in memory)'}: {len(self.segments)} segments, "
            f"{fmt_bytes(reserved)} reserved, {len(self.trace)} trace entries>"
        )


def _by_site(blocks: pd.DataFrame) -> pd.DataFrame:
    """Blocks grouped by top user frame: location, count, bytes, requested_bytes, stack (of the biggest)."""
    if blocks.empty:
        return pd.DataFrame(columns=["location", "count", "bytes", "requested_bytes", "stack"])
    b = blocks.assign(
        location=blocks["frames"].astype(object).fillna(NO_STACK), stack=blocks["stack"].astype(object).fillna("")
    )
    b = b.sort_values("size", ascending=False, kind="stable")
    g = b.groupby("location", sort=False).agg(
        count=("size", "size"),
        bytes=("size", "sum"),
        requested_bytes=("requested_size", "sum"),
        stack=("stack", "first"),
    )
    return g.sort_values(["bytes", "count"], ascending=False, kind="stable").reset_index()


def diff(a: Snapshot, b: Snapshot) -> pd.DataFrame:
    """Allocations alive in `b` that were not alive in `a` (the surviving-allocations view),
    grouped by top user frame, most bytes first: location, count, bytes, requested_bytes,
    stack. A block counts as the same allocation when device, address and size match and,
    where both snapshots recorded one, the stack too (an address reused by another
    allocation site is a new allocation)."""
    key = ["device", "address", "size"]

    def alive(s: Snapshot) -> pd.DataFrame:
        blk = s.blocks[s.blocks["state"].astype(object) == ALLOCATED]
        return blk.assign(stack=blk["stack"].astype(object))

    new = alive(b)
    old = alive(a)[key + ["stack"]].rename(columns={"stack": "old_stack"})
    m = new.merge(old, on=key, how="left", indicator=True)
    same_site = m["old_stack"].isna() | m["stack"].isna() | (m["old_stack"] == m["stack"])
    born = m[~((m["_merge"] == "both") & same_site)]
    return _by_site(born.drop(columns=["old_stack", "_merge"]))
