"""Growth in one PyTorch memory snapshot, from its allocation history.

With history recorded (``torch.cuda.memory._record_memory_history``), a snapshot's trace lists every
allocation and free of its last stretch of the run. An allocation with no free after it, whose
block is still live, survived the whole rest of that stretch. A training loop frees what a step
allocated by the end of the next one, so the survivors of a healthy run are what was made once
(weights, optimizer state: at the start) and what the step in progress holds (at the end). A line
whose allocations keep surviving, throughout the recorded stretch and not in one burst, is one
that memory grows from: a leak's site, the way a series of steps shows one.

A bounded cache still filling over most of the stretch looks the same from one moment; so does a
replay buffer that has not filled yet (docs/snapshots.md says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..schema import Finding, Kind
from ..snapshot import ALLOCATED, NO_STACK, Snapshot
from ..units import fmt_bytes, fmt_duration

#: A site's surviving allocations make a finding when there are at least this many...
MIN_SURVIVORS = 4
#: ...in at least this many of the stretch's PARTS equal parts of time (so, not made in one go at
#: the start or the end)...
PARTS = 4
MIN_PARTS = 3
#: ...and no one part holds more than this share of them (not a burst with a few strays).
MAX_PART_SHARE = 0.6
#: Confidence of a finding, rising with the share of the stretch's parts that saw survivors.
BASE_CONFIDENCE = 0.55


def surviving_allocations(snap: Snapshot) -> pd.DataFrame:
    """Allocations in the trace with no free after them and still live in the snapshot: device,
    addr, size, position (0 to 1 through the device's recorded stretch, by time where recorded,
    else by order), frames, stack."""
    t = snap.trace
    cols = ["device", "addr", "size", "position", "frames", "stack"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    live = _live_addresses(snap)
    rows = []
    for dev, entries in t.groupby("device", sort=False):
        open_at = _unfreed(entries["action"].astype(object).to_numpy(), entries["addr"].to_numpy())
        if not open_at:
            continue
        clock = _times_us(entries)
        if clock is None:  # no times recorded (torch 2.0): by order
            clock = np.arange(len(entries), dtype=np.float64)
        span = clock[-1] - clock[0]
        idx = np.fromiter(open_at.values(), dtype=np.int64)
        kept = entries.iloc[idx].assign(position=(clock[idx] - clock[0]) / span if span > 0 else 0.0)
        if live is not None:
            kept = kept[[(int(dev), int(a)) in live for a in kept["addr"]]]
        rows.append(kept)
    if not rows:
        return pd.DataFrame(columns=cols)
    return pd.concat(rows)[cols]


def _unfreed(actions: np.ndarray, addrs: np.ndarray) -> dict[int, int]:
    """addr -> the row of the last allocation there that no free followed."""
    open_at: dict[int, int] = {}
    for i, (action, addr) in enumerate(zip(actions, addrs, strict=True)):
        if addr is pd.NA:
            continue
        if action == "alloc":
            open_at[int(addr)] = i
        elif action in ("free_requested", "free_completed"):
            open_at.pop(int(addr), None)
    return open_at


def _live_addresses(snap: Snapshot) -> set[tuple[int, int]] | None:
    """(device, address) of the live blocks; None when the snapshot's blocks have no address
    (torch < 2.1 layouts: the trace alone decides then)."""
    b = snap.blocks[snap.blocks["state"].astype(object) == ALLOCATED]
    if b.empty or b["address"].isna().any():
        return None
    return set(zip(b["device"].astype(int), b["address"].astype(int), strict=True))


def detect_snapshot_growth(snap: Snapshot) -> list[Finding]:
    """A SURVIVING_TENSORS finding for each site whose allocations survive throughout the
    snapshot's recorded stretch."""
    kept = surviving_allocations(snap)
    if kept.empty:
        return []
    seconds = _recorded_seconds(snap)
    out = []
    for (dev, site), g in kept.groupby(["device", kept["frames"].astype(object).fillna(NO_STACK)], sort=False):
        finding = _site_finding(int(dev), str(site), g, seconds.get(int(dev)))
        if finding is not None:
            out.append(finding)
    return sorted(out, key=lambda f: -f.total_bytes)


def _site_finding(dev: int, site: str, g: pd.DataFrame, seconds: float | None) -> Finding | None:
    n = len(g)
    if n < MIN_SURVIVORS:
        return None
    part = np.minimum((g["position"].to_numpy(dtype=np.float64) * PARTS).astype(int), PARTS - 1)
    counts = np.bincount(part, minlength=PARTS)
    covered = int((counts > 0).sum())
    if covered < MIN_PARTS or counts.max() > MAX_PART_SHARE * n:
        return None
    total = int(g["size"].sum())
    over = f" over the {fmt_duration(seconds)} recorded" if seconds else ""
    rate = f" ({fmt_bytes(total / seconds)}/s)" if seconds else ""
    evidence = (
        f"{n} allocations made here in the snapshot's recorded history were never freed and are "
        f"still live: {fmt_bytes(total)}{over}{rate}",
        f"they were made throughout that stretch (in {covered} of its {PARTS} quarters: "
        f"{', '.join(map(str, counts))}), not in one go: memory grows from this line",
    )
    return Finding(
        detector="snapshot_growth",
        kind=Kind.SURVIVING_TENSORS,
        location=site,
        bytes_per_step=0.0,
        total_bytes=float(total),
        confidence=min(0.9, BASE_CONFIDENCE + 0.1 * covered),
        evidence=evidence,
        fix=(
            "something keeps the tensors made at this line: a list or dict they are appended to, an "
            "attribute on a module, or an autograd graph kept alive (a loss summed without `.item()`, "
            "outputs kept without `.detach()`). Keep `.item()` or `.detach()` copies, or bound the "
            "container; `memleak.track` around the loop names the holder."
        ),
        data={"device": dev, "count": n, "per_quarter": counts.tolist()},
    )


def _times_us(entries: pd.DataFrame) -> np.ndarray | None:
    """Each trace entry's time in microseconds; None where any is missing (torch < 2.1 records none)."""
    clock = entries["time_us"]
    return clock.to_numpy(dtype=np.float64) if clock.notna().all() else None


def _recorded_seconds(snap: Snapshot) -> dict[int, float]:
    """Seconds each device's recorded stretch lasted, where its times were recorded."""
    out: dict[int, float] = {}
    for dev, entries in snap.trace.groupby("device", sort=False):
        clock = _times_us(entries)
        if clock is not None and len(clock) > 1:
            out[int(dev)] = float(clock[-1] - clock[0]) / 1e6
    return out
