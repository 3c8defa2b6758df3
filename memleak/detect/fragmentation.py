"""Fragmentation of the caching allocator, told apart from plain caching and from
a device that is simply too small. Pure over ``run.steps``; see
docs/detectors-fragmentation.md for the signals and thresholds.

A big reserve that stays put is the cache doing its job: no finding. A finding
needs evidence that the cache is failing the program: the reserve keeps growing
beyond live memory (creep), the allocator has to flush its cache and retry or
raises OOMs, free memory is stranded in split segments while the device is
nearly full, or requests are systematically much smaller than the blocks
serving them. Findings are never leaks (``leak=False``): the program does not
hold this memory, and when the reserve reaches the device the allocator frees
its cache and retries, so it costs time and headroom rather than growing
without bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..run import Run
from ..schema import Finding, Kind
from ..snapshot import parse_alloc_conf
from ..units import fmt_bytes
from .trend import bin_series, kendall, theil

NAME = "fragmentation"

#: Fewest steps a trend test is run on.
MIN_STEPS = 8
#: A trend is real when Kendall's tau is at least this and its p-value below ALPHA.
MIN_TAU = 0.5
ALPHA = 0.01
#: Growth smaller than this over the analysed window is noise (segments come in 2-20 MiB pieces).
MIN_GROWTH = 64 << 20
#: Free bytes stranded in split segments, as a share of the reserve, that count as fragmented
#: when the device is under pressure; the reserve is under pressure above PRESSURE of the device.
SPLIT_SHARE = 0.25
PRESSURE = 0.85
#: Peak live memory above this share of the device means the device is simply too small.
CAPACITY = 0.9
#: Rounding waste ((allocated - requested) / allocated) that is systematic rather than the
#: allocator's usual few percent, and big enough to matter.
WASTE_SHARE = 0.25
WASTE_MIN_BYTES = 256 << 20
#: A reserve under this multiple of the most memory ever live (the allocated peak) is the cache
#: holding the program's high-water mark, however it grew: batches whose shapes grow raise the
#: peak and the reserve with it. On an H100, drifting lengths grew the reserve to 1.19x the peak
#: with expandable segments and to 12.5x without.
PEAK_SLACK = 1.5


# ---------------------------------------------------------------- robust trends (shared with nvml_gap)


@dataclass(frozen=True)
class Growth:
    """A robust trend of one series over its analysed window."""

    slope: float  # Theil-Sen slope, units per step
    tau: float  # Kendall's tau of value against step
    p: float  # its p-value
    rise: float  # slope times the window's length in steps
    steady: bool  # significant and present in both halves: growth, not a step then a plateau


def settle_index(y: np.ndarray) -> int:
    """Where warm-up ends, found from the data: the first step at which the series
    reaches 90% of its late level (median of the second half), at most a third of the run."""
    n = len(y)
    late = float(np.median(y[n // 2 :])) if n else 0.0
    if late <= 0:
        return 0
    reached = np.flatnonzero(y >= 0.9 * late)
    return int(min(reached[0] if reached.size else n, n // 3))


def steady_growth(y: np.ndarray) -> Growth | None:
    """Theil-Sen slope and Kendall's tau of `y` against its index; None when too short."""
    n = len(y)
    if n < MIN_STEPS:
        return None
    _, x, y = bin_series(np.arange(n, dtype=float), y)
    slope = theil(x, y)[0]
    tau, p = kendall(x, y)
    tau, p = (0.0, 1.0) if np.isnan(tau) else (tau, p)
    half = len(y) // 2
    halves = [theil(x[s], y[s])[0] for s in (slice(0, half), slice(half, None))]
    steady = p < ALPHA and tau >= MIN_TAU and slope > 0 and min(halves) >= 0.3 * slope
    return Growth(slope, tau, p, slope * (n - 1), steady)


# ---------------------------------------------------------------- allocator settings and fixes

_SETTING_WHY = {
    "expandable_segments:True": "segments then grow in place instead of splitting into pieces only same-size "
    "requests can reuse",
    "max_split_size_mb:128": "blocks above 128 MiB are then never split for smaller requests",
    "garbage_collection_threshold:0.8": "the allocator then releases unused cached blocks once the reserve passes "
    "80% of the device, before it must flush everything and retry",
}


def allocator_fix(
    conf: dict[str, str],
    *,
    fragmented: bool = False,
    pressure: bool = False,
    capacity: bool = False,
    waste: bool = False,
) -> str:
    """Fix text fitting the evidence, never suggesting a setting `conf` already has."""
    parts = []
    if capacity:
        parts.append(
            "Peak live memory nearly fills the device, so the program must use less memory: lower the "
            "batch size and accumulate gradients over several steps, train in mixed precision "
            "(torch.autocast with bfloat16), or recompute activations with torch.utils.checkpoint."
        )
    native = conf.get("backend", "native").lower() == "native"
    new = []
    if native and (fragmented or pressure):
        if "expandable_segments" not in conf:
            new.append("expandable_segments:True")
        elif "max_split_size_mb" not in conf:
            new.append("max_split_size_mb:128")
    if native and pressure and "garbage_collection_threshold" not in conf:
        new.append("garbage_collection_threshold:0.8")
    if new:
        value = ",".join([*(f"{k}:{v}" if v else k for k, v in conf.items()), *new])
        why = "; ".join(f"with {s}, {_SETTING_WHY[s]}" for s in new)
        parts.append(f"Set PYTORCH_CUDA_ALLOC_CONF={value} before the first CUDA allocation ({why}).")
    if fragmented or waste:
        parts.append(
            "If tensor shapes vary between steps (sequence lengths, image sizes, a short last batch), "
            "pad them to a few bucket sizes so freed blocks fit the next request exactly."
        )
    if not parts:
        parts.append(
            "The allocator settings in place (PYTORCH_CUDA_ALLOC_CONF="
            f"{','.join(f'{k}:{v}' for k, v in conf.items())}) already cover this."
        )
    return " ".join(parts)


# ---------------------------------------------------------------- detector


@dataclass(frozen=True)
class _Signal:
    evidence: str
    confidence: float


def _column(steps: pd.DataFrame, name: str) -> np.ndarray | None:
    if name not in steps or steps[name].notna().sum() < 2:
        return None
    return steps[name].astype(float).ffill().bfill().to_numpy()


def device_total(run: Run) -> float | None:
    """The device's memory (or the user's budget): not Run.capacity_bytes(), which may
    fall back to host RAM, meaningless for the accelerator's allocator."""
    budget = run.meta.get("budget_bytes")
    if budget:
        return float(budget)
    col = _column(run.steps, "device_total_bytes")
    if col is not None:
        return float(col[-1])
    return float(run.meta["device_total_bytes"]) if run.meta.get("device_total_bytes") else None


@dataclass(frozen=True)
class _Window:
    """The series the signals are read from, and the analysed window: after the warm-up, with
    its last fifth ("now")."""

    steps: pd.DataFrame
    reserved: np.ndarray
    allocated: np.ndarray | None
    total: float | None  # the device's memory (or the budget)
    start: int
    tail: slice


def detect(run: Run) -> list[Finding]:
    steps = run.steps
    reserved = _column(steps, "reserved_bytes")
    if reserved is None:
        return []
    allocated = _column(steps, "allocated_bytes")
    start = max(settle_index(reserved), settle_index(allocated) if allocated is not None else 0)
    tail = slice(start + (len(reserved) - start) * 4 // 5, None)  # the last fifth of the window: "now"
    w = _Window(steps, reserved, allocated, device_total(run), start, tail)
    # insertion order is the evidence's order
    signals: dict[str, _Signal] = {}
    data: dict[str, float] = {"window_start_step": start}
    creep = _creep_signal(w, signals, data)
    _failure_signals(w, signals, data)
    peak_reserved = _peak(steps, "reserved_peak_bytes", reserved)
    pressure = bool(w.total and peak_reserved >= PRESSURE * w.total) or "retries" in signals or "ooms" in signals
    _split_signals(w, pressure, signals, data)
    waste = _waste_signal(w, signals, data)
    peak_alloc = _peak(steps, "allocated_peak_bytes", allocated if allocated is not None else reserved)
    harm = "retries" in signals or "ooms" in signals
    fragmented = any(k in signals for k in ("creep", "split", "split_growth"))
    too_small = bool(w.total and peak_alloc >= CAPACITY * w.total) and harm
    if not (fragmented or harm or "waste" in signals):
        return []  # a big but stable reserve is the cache doing its job
    if too_small:
        assert w.total is not None  # too_small needs a device total
        signals["capacity"] = _Signal(
            f"live memory peaked at {fmt_bytes(peak_alloc)}, {peak_alloc / w.total:.0%} of "
            f"the device's {fmt_bytes(w.total)}",
            0.8,
        )
    only_capacity = too_small and not fragmented
    location, total_bytes = _location(w, signals, only_capacity, peak_alloc, waste)
    confidence = 1 - float(np.prod([1 - s.confidence for s in signals.values()]))  # noisy-or of the signals
    data.update(peak_allocated_bytes=peak_alloc, peak_reserved_bytes=peak_reserved, device_total_bytes=w.total or 0)
    return [
        Finding(
            detector=NAME,
            kind=Kind.FRAGMENTATION,
            location=location,
            bytes_per_step=float(creep.slope) if "creep" in signals and creep is not None else 0.0,
            total_bytes=total_bytes,
            confidence=round(min(confidence, 0.95), 3),
            evidence=tuple(s.evidence for s in signals.values()),
            fix=allocator_fix(
                parse_alloc_conf(run.meta.get("pytorch_cuda_alloc_conf") or ""),
                fragmented=fragmented,
                pressure=pressure and not only_capacity,
                capacity=too_small,
                waste="waste" in signals,
            ),
            leak=False,
            data=data,
        )
    ]


def _creep_signal(w: _Window, signals: dict[str, _Signal], data: dict) -> Growth | None:
    """The cache (reserved minus allocated) growing steadily: freed blocks are not reused. Returns
    the cache's trend (None without an allocated series or when too short)."""
    if w.allocated is None:
        return None
    start, reserved, allocated = w.start, w.reserved, w.allocated
    creep = steady_growth(reserved[start:] - allocated[start:])
    if not (creep and creep.steady and creep.rise >= MIN_GROWTH):
        return creep
    high = _peak(w.steps, "allocated_peak_bytes", np.zeros(1))  # 0 in a run without the column: no test
    if high and reserved[-1] < PEAK_SLACK * high:
        data["reserve_over_peak"] = float(reserved[-1] / high)
        return creep  # the reserve follows the peak: the cache is doing its job
    alloc_slope = theil(np.arange(len(allocated) - start, dtype=float), allocated[start:])[0]
    evidence = (
        f"the cache (reserved minus allocated) grew {fmt_bytes(creep.slope)}/step over "
        f"{len(reserved) - start} steps (Kendall tau {creep.tau:.2f}, p={creep.p:.1g}) while allocated "
        f"memory changed {fmt_bytes(alloc_slope, signed=True)}/step: freed blocks are not being reused"
    )
    if high:
        evidence += f"; the reserve is {reserved[-1] / high:.1f}x the most memory ever live ({fmt_bytes(high)})"
    data.update(cache_growth_per_step=creep.slope, allocated_slope=alloc_slope)
    if w.total:
        left = (w.total - reserved[-1]) / creep.slope
        evidence += (
            f"; at this rate the reserve reaches the device's {fmt_bytes(w.total)} in about {max(left, 0):.0f} "
            "steps, then every new segment costs a cache flush and retry"
        )
    signals["creep"] = _Signal(evidence, 0.5 + 0.4 * creep.tau)
    return creep


def _failure_signals(w: _Window, signals: dict[str, _Signal], data: dict) -> None:
    """The allocator failing the program: cache flushes and retries after warm-up, OOMs."""
    retries = _column(w.steps, "num_alloc_retries")
    if retries is not None and retries[-1] > retries[w.start]:
        n = int(retries[-1] - retries[w.start])
        signals["retries"] = _Signal(
            f"the allocator found no free block and had to flush its cache and retry "
            f"cudaMalloc {n} times after warm-up (each retry synchronises the device)",
            0.7,
        )
        data["alloc_retries"] = n
    ooms = _column(w.steps, "num_ooms")
    if ooms is not None and ooms[-1] > 0:
        signals["ooms"] = _Signal(f"the allocator raised {int(ooms[-1])} out-of-memory errors", 0.8)
        data["ooms"] = int(ooms[-1])


def _split_signals(w: _Window, pressure: bool, signals: dict[str, _Signal], data: dict) -> None:
    """Free memory stranded in split segments while the device is under pressure, or growing."""
    split = _column(w.steps, "inactive_split_bytes")
    if split is None:
        return
    tail = w.tail
    share = float(np.median(split[tail] / np.maximum(w.reserved[tail], 1)))
    data["inactive_split_share"] = share
    if pressure and share >= SPLIT_SHARE and np.median(split[tail]) >= MIN_GROWTH:
        signals["split"] = _Signal(
            f"{share:.0%} of the reserve ({fmt_bytes(np.median(split[tail]))}) is free but "
            "stranded in split segments, which the allocator can neither release nor "
            "use for bigger requests, while the device is under pressure",
            0.6,
        )
    grow = steady_growth(split[w.start :])
    if grow and grow.steady and grow.rise >= MIN_GROWTH:
        signals["split_growth"] = _Signal(
            f"inactive split memory grew {fmt_bytes(grow.slope)}/step (Kendall tau {grow.tau:.2f})", 0.6
        )


def _waste_signal(w: _Window, signals: dict[str, _Signal], data: dict) -> float | None:
    """Blocks systematically much bigger than the requests they serve. Returns the median bytes
    allocated but not asked for "now" (None without both series)."""
    requested = _column(w.steps, "requested_bytes")
    if requested is None or w.allocated is None:
        return None
    waste = w.allocated[w.tail] - requested[w.tail]
    waste_share = float(np.median(waste / np.maximum(w.allocated[w.tail], 1)))
    data["rounding_waste_share"] = waste_share
    if waste_share >= WASTE_SHARE and np.median(waste) >= WASTE_MIN_BYTES:
        signals["waste"] = _Signal(
            f"blocks are {waste_share:.0%} bigger than the requests they serve "
            f"({fmt_bytes(np.median(waste))} allocated but not asked for)",
            0.4,
        )
    return float(np.median(waste))


def _location(
    w: _Window, signals: dict[str, _Signal], only_capacity: bool, peak_alloc: float, waste: float | None
) -> tuple[str, float]:
    """Where the finding points, and the bytes it concerns: the device (too small), the allocator's
    rounding waste, or its fragmented cache."""
    if only_capacity:
        return "device memory: the run's peak live memory nearly fills the device", peak_alloc
    if set(signals) == {"waste"}:
        assert waste is not None  # the waste signal needs both series
        return "PyTorch caching allocator (blocks much bigger than the requests they serve)", waste
    cache_now = float(np.median(w.reserved[w.tail] - w.allocated[w.tail])) if w.allocated is not None else 0.0
    return "PyTorch caching allocator (fragmented cache)", cache_now


def _peak(steps: pd.DataFrame, name: str, fallback: np.ndarray) -> float:
    col = _column(steps, name)
    return float(np.max(col if col is not None else fallback))
