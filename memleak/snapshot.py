"""PyTorch memory snapshots (``torch.cuda.memory._dump_snapshot``) as pandas tables.

A snapshot is the caching allocator's state at one moment: its segments (memory
taken from the driver with cudaMalloc), the blocks each segment is split into
(live tensors, blocks freed on another stream, free pieces) with the stack that
allocated them, and, when history recording was on, a ring buffer of allocator
actions (``device_traces``). Layouts read (see docs/snapshots.md):

- torch >= 2.1: ``{"segments": [...], "device_traces": [[...]], ...}``; blocks
  carry ``address``, ``requested_size`` and ``frames``.
- torch 1.13/2.0: the same dict, but blocks carry ``history``
  (``[{"addr", "real_size", "frames"}]``, the current allocation first) instead
  of ``address``/``requested_size``/``frames``.
- a plain list of segments: a pickled ``torch.cuda.memory_snapshot()``.

Pickles are read with an unpickler that builds plain containers only, so a
hostile file cannot run code.
"""
from __future__ import annotations

import operator
import os
import pickle
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .errors import RunFileError
from .schema import Finding, Kind
from .units import fmt_bytes

#: Block states. PyTorch writes "active_pending_free" for a block freed by the
#: program but still in use by another stream; its docstrings call it "active_awaiting_free".
ALLOCATED = "active_allocated"
PENDING_FREE = ("active_pending_free", "active_awaiting_free")
INACTIVE = "inactive"

#: Trace actions (TraceEntry.action). Unknown actions from newer versions are kept as they are.
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot")

#: The small pool serves requests < 1 MiB from 2 MiB segments; large-pool segments are bigger.
_SMALL_SEGMENT = 2 << 20

#: Snapshot.findings(): free bytes stranded in split segments (inactive split) that make
#: a FRAGMENTATION finding. One snapshot is one moment, so the bar is higher than for a
#: step series: a quarter of the reserve, at least 64 MiB, scattered (no single free
#: block holds half of the free memory).
STRANDED_SHARE = 0.25
STRANDED_MIN_BYTES = 64 << 20
SCATTERED = 0.5

NO_STACK = "<no stack recorded>"

SEGMENT_COLUMNS = ["device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                   "stream", "segment_type", "is_expandable", "n_blocks"]
BLOCK_COLUMNS = ["device", "segment_address", "segment_type", "address", "size", "requested_size", "state",
                 "frames", "stack"]
TRACE_COLUMNS = ["device", "action", "addr", "size", "stream", "time_us", "device_free", "frames", "stack"]
FRAGMENTATION_COLUMNS = ["device", "pool", "segments", "reserved_bytes", "allocated_bytes", "requested_bytes",
                         "pending_free_bytes", "free_bytes", "largest_free_bytes", "inactive_split_bytes",
                         "external_fragmentation", "internal_fragmentation"]


# ---------------------------------------------------------------- safe unpickling

class _Refused(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle opcodes build by themselves: dict, list, tuple, str,
    bytes, int, float, bool, None. Snapshots need nothing else (segment_pool_id is a
    tuple), so every global is refused: without one no callable exists to run."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def _unpickle(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size == 0:
            raise RunFileError(path, "the file is empty: no snapshot was written to it")
        with open(path, "rb") as fh:
            return _PlainUnpickler(fh).load()
    except _Refused as e:
        raise RunFileError(path, f"memleak refuses to build {e.name}: snapshot pickles hold only plain containers "
                                 "(dicts, lists, strings, numbers), so this file is not a PyTorch memory snapshot; "
                                 "nothing in it was run") from None
    except OSError as e:
        raise RunFileError(path, f"cannot read the file: {e.strerror or e}") from None
    except EOFError:
        raise RunFileError(path, "the pickle ends too early: the file is truncated "
                                 "(was the process killed while dumping the snapshot?)") from None
    except MemoryError:  # a corrupt length field asks for an absurd buffer
        raise RunFileError(path, "not a readable pickle: it asks for more memory than this machine has "
                                 "(the file is corrupt, or too big to load here)") from None
    except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, UnicodeDecodeError) as e:
        what = "truncated" if "truncated" in str(e) else "corrupt"
        raise RunFileError(path, f"not a readable pickle, the file is {what} ({e})") from None


def load_snapshot(path: str | os.PathLike) -> Snapshot:
    """Read a pickle written by ``torch.cuda.memory._dump_snapshot`` (any version) or a
    pickled ``torch.cuda.memory_snapshot()`` list. Raises RunFileError naming the file
    when it is unreadable, hostile or not a snapshot."""
    p = Path(path)
    data = _unpickle(p)
    try:
        return Snapshot.from_data(data, path=str(p))
    except _NotASnapshot as e:
        raise RunFileError(p, f"this pickle is not a PyTorch memory snapshot: {e}") from None
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        raise RunFileError(p, "this pickle is not a PyTorch memory snapshot: a field is missing or has the "
                              f"wrong type ({e!r})") from None


# ---------------------------------------------------------------- layout checks

class _NotASnapshot(ValueError):
    pass


def _layout(data: Any) -> tuple[list, list, dict]:
    """(segments, device_traces, allocator_settings) from any snapshot layout."""
    if isinstance(data, list):  # pickled torch.cuda.memory_snapshot(): segments only
        segments, traces, settings = data, [], {}
    elif isinstance(data, dict):
        if "segments" not in data:
            keys = ", ".join(sorted(map(str, data))[:8]) or "none"
            raise _NotASnapshot(f"the dict has no 'segments' key (its keys: {keys})")
        segments, traces = data["segments"], data.get("device_traces") or []
        settings = data.get("allocator_settings") or {}
    else:
        raise _NotASnapshot(f"it holds a {type(data).__name__}, not a dict with 'segments' and "
                            "'device_traces' or a list of segments")
    if not isinstance(segments, list):
        raise _NotASnapshot(f"'segments' is a {type(segments).__name__}, not a list")
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or "total_size" not in seg or not isinstance(seg.get("blocks"), list):
            raise _NotASnapshot(f"segment {i} is not a dict with 'total_size' and a list of 'blocks'")
        for j, b in enumerate(seg["blocks"]):
            if not isinstance(b, dict) or "size" not in b or "state" not in b:
                raise _NotASnapshot(f"block {j} of segment {i} is not a dict with 'size' and 'state'")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise _NotASnapshot("'device_traces' is not a list of lists (one per device)")
    for dev, entries in enumerate(traces):
        if not all(isinstance(e, dict) for e in entries):
            raise _NotASnapshot(f"an entry of device_traces[{dev}] is not a dict")
    return segments, traces, settings if isinstance(settings, dict) else {}


# ---------------------------------------------------------------- stacks

#: A frame as a hashable (filename, line, name): the key stacks are cached by.
_FRAME_KEY = operator.itemgetter("filename", "line", "name")


def _frame_str(frame: tuple, full: bool) -> str:
    filename, line, name = frame
    return f"{filename if full else filename.rsplit('/', 1)[-1]}:{line}:{name}"


def _is_user_frame(filename: str) -> bool:
    """A Python frame outside torch, the standard library and memleak: where a person
    would look. Third-party model code (transformers, timm...) counts as user code."""
    if not filename.endswith(".py") or "<frozen" in filename:
        return False
    if "/torch/" in filename or "/memleak/" in filename:
        return False
    return not ("/lib/python3" in filename and "-packages/" not in filename)


class _Stacks:
    """Formats each distinct allocation stack once. torch symbolises every distinct
    traceback once and shares its frame list between entries (the pickle keeps that
    sharing), so most lookups hit the cache by list identity; lists that are equal but
    not shared hit the cache by content. Lists stay alive in the snapshot data while
    this runs, so their ids are stable."""

    def __init__(self) -> None:
        self.tops: dict[str, int] = {}
        self.fulls: dict[str, int] = {}
        self._by_list: dict[int, tuple[int, int]] = {}
        self._by_content: dict[tuple, tuple[int, int]] = {}

    def codes(self, frames: Any) -> tuple[int, int]:
        """(top-frame code, full-stack code); (-1, -1) when no stack was recorded."""
        if not frames:
            return -1, -1
        c = self._by_list.get(id(frames))
        if c is None:
            key = tuple(map(_FRAME_KEY, frames))
            c = self._by_content.get(key)
            if c is None:
                c = self._by_content[key] = self._format(key)
            self._by_list[id(frames)] = c
        return c

    def _format(self, frames: tuple[tuple, ...]) -> tuple[int, int]:
        top = next((f for f in frames if _is_user_frame(f[0])), None)
        if top is None:  # no user frame: the innermost Python frame, else the innermost frame
            top = next((f for f in frames if f[0].endswith(".py")), frames[0])
        full = "\n".join(_frame_str(f, full=True) for f in frames)
        return (self.tops.setdefault(_frame_str(top, full=False), len(self.tops)),
                self.fulls.setdefault(full, len(self.fulls)))

    def columns(self, codes: Iterable[tuple[int, int]]) -> tuple[pd.Categorical, pd.Categorical]:
        pairs = np.array(list(codes), dtype=np.int64).reshape(-1, 2)
        return (pd.Categorical.from_codes(pairs[:, 0], categories=list(self.tops)),
                pd.Categorical.from_codes(pairs[:, 1], categories=list(self.fulls)))


# ---------------------------------------------------------------- tables

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


def _segment_tables(segments: list[dict], stacks: _Stacks) -> tuple[pd.DataFrame, pd.DataFrame]:
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
        row = {"device": device, "address": base, "total_size": total,
               "allocated_size": seg.get("allocated_size", allocated), "active_size": seg.get("active_size", active),
               "requested_size": seg.get("requested_size", requested), "stream": seg.get("stream", 0),
               "segment_type": kind, "is_expandable": bool(seg.get("is_expandable", False)),
               "n_blocks": len(seg["blocks"])}
        if has_pool_id:
            row["segment_pool_id"] = tuple(seg["segment_pool_id"]) if "segment_pool_id" in seg else None
        seg_rows.append(row)
    seg_df = pd.DataFrame(seg_rows, columns=SEGMENT_COLUMNS + (["segment_pool_id"] if has_pool_id else []))
    columns = dict(zip(_BLOCK_FIELDS, zip(*block_rows))) if block_rows else dict.fromkeys(_BLOCK_FIELDS, ())
    blocks = pd.DataFrame({k: pd.Categorical(v) if k in ("segment_type", "state") else np.array(v, dtype=np.int64)
                           for k, v in columns.items()})
    blocks["frames"], blocks["stack"] = stacks.columns(codes)
    return seg_df, blocks[BLOCK_COLUMNS]


def _trace_table(traces: list[list[dict]], stacks: _Stacks) -> pd.DataFrame:
    entries = [e for dev in traces for e in dev]
    n = len(entries)
    frames, stack = stacks.columns(stacks.codes(e.get("frames")) for e in entries)
    return pd.DataFrame({
        "device": np.repeat(np.arange(len(traces), dtype=np.int64), [len(d) for d in traces]),
        "action": pd.Categorical([e.get("action") for e in entries]),
        "addr": _ints([e.get("addr") for e in entries]),
        "size": np.fromiter((e.get("size", 0) for e in entries), dtype=np.int64, count=n),
        "stream": _ints([e.get("stream", 0) for e in entries]),
        "time_us": _ints([e.get("time_us") for e in entries]),
        "device_free": _ints([e.get("device_free") for e in entries]),
        "frames": frames,
        "stack": stack,
    }, columns=TRACE_COLUMNS)


# ---------------------------------------------------------------- Snapshot

class Snapshot:
    """One PyTorch memory snapshot as tables.

    - ``segments``: one row per segment (cudaMalloc'd region).
    - ``blocks``: one row per block; ``frames`` is the top user frame
      ("file.py:line:function"), ``stack`` the whole stack, innermost first.
    - ``trace``: the allocator's recorded actions, oldest first per device
      (empty unless ``_record_memory_history`` was on).
    - ``allocator_settings``: the allocator configuration, when the snapshot has it.
    """

    def __init__(self, segments: pd.DataFrame, blocks: pd.DataFrame, trace: pd.DataFrame,
                 allocator_settings: dict[str, Any] | None = None, path: str | None = None):
        self.segments = segments
        self.blocks = blocks
        self.trace = trace
        self.allocator_settings = allocator_settings or {}
        self.path = path

    @classmethod
    def from_data(cls, data: Any, path: str | None = None) -> Snapshot:
        """Build from an unpickled snapshot (dict or list of segments)."""
        segments, traces, settings = _layout(data)
        stacks = _Stacks()
        seg_df, blocks = _segment_tables(segments, stacks)
        return cls(seg_df, blocks, _trace_table(traces, stacks), settings, path)

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
        seg = self.segments.groupby(keys, observed=True).agg(segments=("total_size", "size"),
                                                             reserved_bytes=("total_size", "sum"))
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
            allocated > 0, (allocated - out["requested_bytes"]) / allocated.where(allocated > 0, 1), 0.0)
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
        from .detect.fragmentation import parse_alloc_conf  # lazily: detect/ need not load with snapshots

        s = self.allocator_settings
        conf = parse_alloc_conf(str(s.get("PYTORCH_CUDA_ALLOC_CONF") or ""))
        if s.get("expandable_segments"):
            conf.setdefault("expandable_segments", "True")
        if 0 < int(s.get("max_split_size") or 0) < (1 << 62):  # SIZE_MAX means "never split-limited"
            conf.setdefault("max_split_size_mb", str(int(s["max_split_size"]) >> 20))
        if float(s.get("garbage_collection_threshold") or 0) > 0:
            conf.setdefault("garbage_collection_threshold", str(s["garbage_collection_threshold"]))
        return conf

    def findings(self) -> list[Finding]:
        """A FRAGMENTATION finding per device whose cache strands much free memory in
        pieces (or whose recorded OOM would have fit in the cache's free memory but not
        in any one free block). Never a leak: the program does not hold this memory."""
        from .detect.fragmentation import allocator_fix

        frag = self.fragmentation()
        conf = self.alloc_conf()
        ooms = self.ooms()
        out = []
        for dev, rows in frag.groupby("device"):
            free_total = int(rows["free_bytes"].sum())
            largest = int(rows["largest_free_bytes"].max())
            reserved = int(rows["reserved_bytes"].sum())
            stranded = int(rows["inactive_split_bytes"].sum())
            share = stranded / reserved if reserved else 0.0
            scattered = free_total > 0 and 1 - largest / free_total >= SCATTERED
            evidence = []
            confidence = 0.0
            if stranded >= STRANDED_MIN_BYTES and share >= STRANDED_SHARE and scattered:
                evidence.append(f"{fmt_bytes(stranded)} ({share:.0%} of the {fmt_bytes(reserved)} reserved) is free "
                                f"but stranded in split segments; the largest free block is {fmt_bytes(largest)} "
                                f"of {fmt_bytes(free_total)} free")
                confidence = min(0.9, 0.5 + share)
            dev_ooms = ooms[ooms["device"] == dev]
            for oom in dev_ooms.itertuples():
                driver_free = 0 if pd.isna(oom.device_free) else int(oom.device_free)
                if largest < oom.size <= free_total + driver_free:
                    evidence.append(f"an OOM asked for {fmt_bytes(oom.size)} at {_site(oom.frames)}: the cache held "
                                    f"{fmt_bytes(free_total)} free and the driver {fmt_bytes(driver_free)}, "
                                    f"but no free block was bigger than {fmt_bytes(largest)}")
                    confidence = max(confidence, 0.85)
            if not evidence:
                continue
            out.append(Finding(
                detector="snapshot", kind=Kind.FRAGMENTATION,
                location=f"PyTorch caching allocator on cuda:{dev} (fragmented cache)",
                bytes_per_step=0.0, total_bytes=float(stranded), confidence=confidence,
                evidence=tuple(evidence), fix=allocator_fix(conf, fragmented=True, pressure=not dev_ooms.empty),
                leak=False,
                data={"device": int(dev), "reserved_bytes": reserved, "free_bytes": free_total,
                      "largest_free_bytes": largest, "inactive_split_bytes": stranded}))
        return out

    def summary(self) -> str:
        """A readable account: the cache per device and pool, the biggest live allocation
        sites, the trace and its OOMs, and the findings."""
        lines = [f"PyTorch memory snapshot {self.path or '(in memory)'}: {len(self.segments)} segments, "
                 f"{len(self.blocks)} blocks, {len(self.trace)} trace entries"]
        for r in self.fragmentation().itertuples():
            lines.append(f"  cuda:{r.device} {r.pool:5s} reserved {fmt_bytes(r.reserved_bytes)}, allocated "
                         f"{fmt_bytes(r.allocated_bytes)} (requested {fmt_bytes(r.requested_bytes)}), free "
                         f"{fmt_bytes(r.free_bytes)}, largest free block {fmt_bytes(r.largest_free_bytes)}, "
                         f"inactive split {fmt_bytes(r.inactive_split_bytes)}; fragmentation external "
                         f"{r.external_fragmentation:.0%}, internal {r.internal_fragmentation:.0%}")
        sites = self.live_by_site().head(5)
        if not sites.empty:
            lines.append("  live allocations by site:")
            lines += [f"    {fmt_bytes(r.bytes):>10s} in {r.count:5d} blocks  {r.location}" for r in sites.itertuples()]
        if not self.trace.empty:
            counts = self.trace["action"].value_counts()
            lines.append("  trace: " + ", ".join(f"{n} {a}" for a, n in counts.items() if n))
        for oom in self.ooms().itertuples():
            free = "?" if pd.isna(oom.device_free) else fmt_bytes(oom.device_free)
            lines.append(f"  OOM on cuda:{oom.device}: asked for {fmt_bytes(oom.size)} with {free} free on the "
                         f"device, at {_site(oom.frames)}")
        for f in self.findings():
            lines.append(f"  finding: {f.kind} at {f.location} (confidence {f.confidence:.0%})")
            lines += [f"    - {e}" for e in f.evidence]
            lines.append(f"    fix: {f.fix}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        reserved = int(self.segments["total_size"].sum()) if not self.segments.empty else 0
        return (f"<memleak.Snapshot {self.path or '(in memory)'}: {len(self.segments)} segments, "
                f"{fmt_bytes(reserved)} reserved, {len(self.trace)} trace entries>")


def _site(frames: Any) -> str:
    return frames if isinstance(frames, str) else NO_STACK


def _by_site(blocks: pd.DataFrame) -> pd.DataFrame:
    """Blocks grouped by top user frame: location, count, bytes, requested_bytes, stack (of the biggest)."""
    if blocks.empty:
        return pd.DataFrame(columns=["location", "count", "bytes", "requested_bytes", "stack"])
    b = blocks.assign(location=blocks["frames"].astype(object).fillna(NO_STACK),
                      stack=blocks["stack"].astype(object).fillna(""))
    b = b.sort_values("size", ascending=False, kind="stable")
    g = b.groupby("location", sort=False).agg(count=("size", "size"), bytes=("size", "sum"),
                                              requested_bytes=("requested_size", "sum"), stack=("stack", "first"))
    return g.sort_values(["bytes", "count"], ascending=False, kind="stable").reset_index()


def _as_snapshot(s: Snapshot | str | os.PathLike) -> Snapshot:
    return s if isinstance(s, Snapshot) else load_snapshot(s)


def diff(a: Snapshot | str | os.PathLike, b: Snapshot | str | os.PathLike) -> pd.DataFrame:
    """Allocations alive in `b` that were not alive in `a` (the surviving-allocations view),
    grouped by top user frame, most bytes first: location, count, bytes, requested_bytes,
    stack. A block counts as the same allocation when device, address and size match and,
    where both snapshots recorded one, the stack too (an address reused by another
    allocation site is a new allocation)."""
    a, b = _as_snapshot(a), _as_snapshot(b)
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
