"""Linear memory growth: is the memory series leaking, after its warm-up?

Pure over ``run.steps``; docs/detectors-growth.md explains how it decides and why
the thresholds are what they are. In short:

1. Long series are binned (medians) to at most MAX_POINTS points, which keeps
   Theil-Sen (quadratic in the points) fast and averages the noise.
2. The warm-up is found from the data: the prefix (at most half the series) whose
   points are mostly outliers to the steady state, i.e. far from robust lines through
   the second half and through the whole series (optimizer state created in the
   first steps, a cache filling up).
3. The shape after the warm-up: regular large drops make a sawtooth, judged on its
   per-cycle minima; a lasting fall is a release ("drop"); otherwise the series
   itself is judged.
4. Growth needs all of: a significant Kendall tau, a rise many times the residual
   noise and a sizeable share of the level, a slope kept in both halves (a cache
   decelerates), and a rise that is not one step or a few jumps.

This module reads the series and words the result; growth_shape finds the warm-up
and the shape, on the statistics of growth_stats.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..run import HOST_COLUMNS, Run, first_iteration_end, own_adjusted, step_axis
from ..schema import ALLOC_SITES_EVENT, NO_STEPS, Finding, Kind, Shape, to_jsonable
from ..units import fmt_bytes
from .garbage import collected
from .growth_shape import MIN_POINTS, Verdict, classify, label_warmup, warmup_length
from .lazy_state import created_lazily
from .new_shapes import shapes_note
from .thresholds import min_rel_growth, not_a_leak
from .trend import bin_series

NAME = "growth"

#: Noise is never taken as smaller than this share of the level (allocator series are often exact).
NOISE_FLOOR_REL = 1e-4

SHAPES = tuple(Shape)

LEAK_FIX = (
    "Something keeps tensors alive from one iteration to the next. Look for: a running loss "
    "summed as a tensor (total_loss += loss keeps every step's graph; use loss.item()), outputs, "
    "losses or activations appended to a list without .detach() (or .item() / .cpu()), and tensors "
    "cached on self or in a global or module-level dict that gains an entry every step. "
    'Run with level="full" to have memleak name the holder and the line that creates the tensors.'
)
#: LEAK_FIX's last sentence for a run that had full detail already (the holders it named, if
#: any, are suspects of their own: none of them grows without bound, or it would explain this).
LEAK_FIX_AFTER_FULL = (
    "memleak looked with full detail on {steps} and found no holder that grows without bound: what "
    "grows is kept where its walk "
    "does not reach (a local variable of a function another thread runs, one it could not name from "
    "that function's code: running threads' frames are not read; a C extension's "
    "or a library's own cache; an object it skips) or is not Python "
    "objects at all (native allocations); tracemalloc snapshots two steps apart show the growing site."
)
#: ... its last clause where memleak traced the allocations itself (probes/alloc_sites.py).
TRACED_NO_SITE = (
    "tracemalloc, run by memleak over steps {since}-{step} while the heap rose, found no line of your code "
    "whose Python or numpy allocations grew with it: what grows is most likely native memory (torch's own, "
    "a C extension's)."
)
#: RSS that leaks is judged on a CPU run only where the C heap stays flat beside it: the heap's slope
#: under this share of RSS's (a native mmap leak: 86 B a step against 512 KiB; a cache of random-length
#: tables filling up, whose large frees glibc keeps mapped for a while: 175 KiB against 614 KiB, noise).
HEAP_FLAT_SHARE = 0.1
OUTSIDE_HEAP_FIX = (
    "The process's resident memory grows every step while the C heap's bytes in use stay flat: what grows "
    "is outside malloc. Look for buffers a native library maps itself and never unmaps (a C extension's "
    "scratch memory, mmap), threads started every step and never joined (each keeps its stack), many small "
    "Python objects kept alive (they live in Python's own arenas, not on the C heap: the walk names them "
    "where it reaches them), or memory-mapped files read for the first time (np.memmap, "
    "torch.load(mmap=True), a dataset on a memory-mapped file: their pages count in RSS until the whole "
    "file has been read once, and are no leak)."
)
#: RSS growth that the C heap's free bytes account for this share of, or more, is fragmentation.
FREED_KEPT_SHARE = 0.4
FREED_KEPT_FIX = (
    "No leak of yours: allocations of varying sizes left freed memory that malloc keeps for reuse, and "
    "RSS counts it. It levels off once the pattern of sizes repeats; to hand more back to the system, "
    "set MALLOC_TRIM_THRESHOLD_ (or MALLOC_ARENA_MAX=2), or preload jemalloc or tcmalloc."
)
HOST_FIX = (
    "Host memory grows every step. Look for host-side lists or dicts that grow each "
    "iteration (metrics, predictions moved to CPU, logged tensors or strings), Python objects "
    "kept alive by caches or closures, and DataLoader workers: Python lists or dicts in a Dataset "
    "are copied page by page as workers touch their refcounts (store numpy arrays instead, or use "
    "fewer / persistent workers). tracemalloc snapshots two steps apart show the growing site."
)


@dataclass(frozen=True)
class Growth:
    column: str | None  # series analysed (run.memory_column() by default)
    shape: Shape
    leak: bool  # True only for sustained linear growth after warm-up
    warmup_steps: int  # rows of run.steps excluded from the start (found from the data)
    slope: float  # bytes per step after warm-up (Theil-Sen)
    intercept: float  # of the fitted line, in units of the step column
    p_value: float  # Kendall tau vs step; nan for a constant series
    confidence: float  # 0..1 that the series leaks; >= 0.5 exactly when leak
    n_steps: int  # rows analysed after warm-up
    capacity_bytes: float | None
    steps_to_full: float | None
    seconds_to_full: float | None
    evidence: tuple[str, ...]


# ---------------------------------------------------------------- public


def analyze_growth(run: Run, column: str | None = None, min_rel: float | None = None) -> Growth:
    """Classify the shape of one memory series of `run` and decide whether it leaks. `min_rel`:
    the share of the level a rise must reach (by default MIN_REL_GROWTH, MIN_REL_GROWTH_HOST for RSS)."""
    column = column or run.memory_column()
    capacity = _capacity(run, column)
    series = memory_series(run, column)
    if series is None:
        why = NO_STEPS if not len(run.steps) else f"no usable values of {column or 'any memory column'}"
        return _empty(column, Shape.NO_DATA, capacity, 0, 0, why)
    pos, x_raw, y_raw = series
    if len(y_raw) < MIN_POINTS:
        return _empty(
            column,
            Shape.TOO_SHORT,
            capacity,
            int(pos[0]),
            len(y_raw),
            f"only {len(y_raw)} usable values of {column}; at least {MIN_POINTS} are needed to judge a trend",
        )

    raw_index, x, y = bin_series(x_raw, y_raw)
    floor = max(NOISE_FLOOR_REL * float(np.median(np.abs(y))), 1.0)
    if min_rel is None:
        min_rel = min_rel_growth(column)
    w = warmup_length(x, y, floor)
    if len(y) - w < MIN_POINTS:
        first = int(raw_index[w])
        return _empty(
            column,
            Shape.TOO_SHORT,
            capacity,
            int(pos[first]),
            len(y_raw) - first,
            f"only {len(y_raw) - first} usable values of {column} after a warm-up of {pos[first]} "
            f"steps; at least {MIN_POINTS} are needed to judge a trend",
        )

    v = classify(x[w:], y[w:], floor, min_rel)
    v = label_warmup(v, y, w, warmup_rows=int(pos[raw_index[w]]))
    first = int(raw_index[w + v.start])
    g = _growth(
        run,
        column,
        capacity,
        v,
        warmup_rows=int(pos[first]),
        n_steps=len(y_raw) - first,
        last_value=float(y_raw[-1]),
        raw_x=x_raw[first:],
    )
    g = collected(run, g, y_raw[first:])  # cyclic garbage, given back by a collection
    return created_lazily(run, g, x_raw[first:], y_raw[first:])  # optimizer state, bounded


def detect(run: Run) -> list[Finding]:
    """A LINEAR_GROWTH finding when the primary memory series leaks, and a HOST_GROWTH
    finding when host memory (the C heap, else RSS) leaks while the primary series is a
    device one, unless it is simply the primary (CPU tensor) leak itself."""
    findings = []
    primary = run.memory_column()
    g = analyze_growth(run, primary) if primary else None
    if g is not None and g.leak:
        findings.append(_finding(run, g, Kind.LINEAR_GROWTH, leak_fix(run)))
    if primary == "heap_bytes" and g is not None and not g.leak and "rss_bytes" in run.steps:
        # a CPU run whose C heap stays flat can still grow outside it: RSS is the run's memory too
        r = analyze_growth(run, "rss_bytes")
        if r.leak and g.slope < HEAP_FLAT_SHARE * r.slope and not _file_pages(run, r):
            kept = _freed_kept(run, r)
            findings.append(kept or _finding(run, r, Kind.LINEAR_GROWTH, OUTSIDE_HEAP_FIX))
    host = run.host_column()
    if host is not None and primary not in HOST_COLUMNS:
        h = analyze_growth(run, host, min_rel=min_rel_growth(host, accelerator=True))
        if h.leak and not _host_growth_is_tensors(run, g, h):
            findings.append(_finding(run, h, Kind.HOST_GROWTH, HOST_FIX))
    return findings


def leak_fix(run: Run) -> str:
    """LEAK_FIX, whose advice to run with full detail is dropped where the run had it already."""
    full = [(a, b) for a, b, level, _ in run.detail_spans() if level == "full"]
    if not full:
        return LEAK_FIX
    n = sum(b - a + 1 for a, b in full)
    steps = f"step {full[0][0]}" if n == 1 else f"{n} steps"
    fix = LEAK_FIX.rsplit(" Run with", 1)[0] + " " + LEAK_FIX_AFTER_FULL.format(steps=steps)
    traced = [e for e in run.events if e.get("event") == ALLOC_SITES_EVENT]
    if traced:  # memleak ran tracemalloc itself: no line it found explains the growth, or one would be named
        fix = fix.rsplit(" tracemalloc snapshots", 1)[0] + " " + TRACED_NO_SITE.format(**traced[-1])
    return fix


# ---------------------------------------------------------------- input


def memory_series(run: Run, column: str | None):
    """(row positions, x, y) of the finite values of `column`, or None."""
    if column is None or column not in run.steps:
        return None
    steps = run.steps
    y = np.asarray(steps[column], dtype=float)
    x = step_axis(steps)
    keep = np.isfinite(y) & np.isfinite(x) & (x >= first_iteration_end(run))
    if not keep.any():
        return None
    rows = np.flatnonzero(keep)
    # memleak's own bookkeeping bytes on the heap are not the user's (detect/lifetimes.py)
    return rows, x[keep], own_adjusted(steps, column, y[keep], rows)


def _capacity(run: Run, column: str | None) -> float | None:
    """Where the series hits the wall: host RAM for host memory on an accelerator run,
    else the run's capacity (the user's budget, the device, host RAM on a CPU run)."""
    if column in HOST_COLUMNS and not run.device.startswith("cpu"):
        v = run.meta.get("host_memory_bytes")
        return float(v) if v else None
    return run.capacity_bytes()


# ---------------------------------------------------------------- output


def _empty(column, shape: Shape, capacity, warmup_rows, n, why) -> Growth:
    return Growth(column, shape, False, warmup_rows, 0.0, 0.0, math.nan, 0.0, n, capacity, None, None, (why,))


def _growth(run, column, capacity, v: Verdict, warmup_rows, n_steps, last_value, raw_x) -> Growth:
    t = v.trend
    steps_to_full = seconds_to_full = None
    if v.leak and capacity is not None and t.slope > 0:
        steps_to_full = max(capacity - last_value, 0.0) / t.slope
        per_step = _seconds_per_step(run)
        seconds_to_full = steps_to_full * per_step if per_step else None
    confidence = 1.0 - 0.5**v.score if v.score > 0 else 0.0
    evidence = _evidence(column, v, warmup_rows, n_steps, raw_x, capacity, steps_to_full, seconds_to_full)
    return Growth(
        column,
        v.shape,
        v.leak,
        warmup_rows,
        t.slope,
        t.intercept,
        t.p,
        round(confidence, 3),
        n_steps,
        capacity,
        steps_to_full,
        seconds_to_full,
        evidence,
    )


def _seconds_per_step(run: Run) -> float | None:
    """Median step duration, from the duration column or the time column."""
    steps = run.steps
    if "duration" in steps:
        d = np.asarray(steps["duration"], dtype=float)
        d = d[np.isfinite(d) & (d > 0)]
        if d.size:
            return float(np.median(d))
    if "time" in steps:
        t = np.asarray(steps["time"], dtype=float)
        dt, ds = np.diff(t), np.diff(step_axis(steps))
        ok = np.isfinite(dt) & (dt > 0) & (ds > 0)
        if ok.any():
            return float(np.median(dt[ok] / ds[ok]))
    return None


def _evidence(column, v: Verdict, warmup_rows, n_steps, raw_x, capacity, steps_to_full, seconds_to_full):
    t = v.trend
    x0, x1 = float(raw_x[0]), float(raw_x[-1])
    lines = [
        f"{column} went from {fmt_bytes(t.intercept + t.slope * x0)} to {fmt_bytes(t.intercept + t.slope * x1)} "
        f"(fitted) over {n_steps} steps after a warm-up of {warmup_rows} steps: "
        f"{fmt_bytes(t.slope, signed=True)}/step (Theil-Sen)",
    ]
    if math.isnan(t.p):
        lines.append("the values are constant: no trend")
    else:
        share = 100 * t.rise / t.level if t.level else math.inf
        lines.append(
            f"Kendall tau {t.tau:.2f} against the step, p = {t.p:.2g}; total rise "
            f"{fmt_bytes(t.rise, signed=True)} is {t.rise / t.noise:.1f}x the residual noise "
            f"({fmt_bytes(t.noise)}) and {share:.1f} % of the level ({fmt_bytes(t.level)})"
        )
        lines.append(
            f"slope {fmt_bytes(t.slope_first, signed=True)}/step in the first half, "
            f"{fmt_bytes(t.slope_second, signed=True)}/step in the second"
        )
    lines.extend(v.notes)
    if steps_to_full is not None:
        when = f" (about {_fmt_seconds(seconds_to_full)})" if seconds_to_full is not None else ""
        lines.append(
            f"at this rate the {fmt_bytes(capacity)} available are full in about {steps_to_full:,.0f} more steps{when}"
        )
    return tuple(lines)


def _fmt_seconds(s: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.0f} s"


def _finding(run: Run, g: Growth, kind: Kind, fix: str) -> Finding:
    x = step_axis(run.steps)
    total = g.slope * float(x[-1] - x[g.warmup_steps])  # the fitted rise over the analysed steps
    return Finding(
        detector=NAME,
        kind=kind,
        location=g.column or "",
        bytes_per_step=g.slope,
        total_bytes=total,
        confidence=g.confidence,
        evidence=g.evidence,
        fix=fix,
        leak=True,
        data=to_jsonable(
            {
                "column": g.column,
                "shape": g.shape,
                "slope": g.slope,
                "intercept": g.intercept,
                "warmup_steps": g.warmup_steps,
                "n_steps": g.n_steps,
                "p_value": g.p_value,
                "capacity_bytes": g.capacity_bytes,
                "steps_to_full": g.steps_to_full,
                "seconds_to_full": g.seconds_to_full,
                # host growth that no culprit explains may follow new input shapes (new_shapes.py)
                "new_shapes": shapes_note(run) if g.column in HOST_COLUMNS else None,
            }
        ),
    )


def _file_pages(run: Run, rss: Growth) -> bool:
    """Whether RSS grows by pages backed by a file (or shared memory) for the most part: a
    memory-mapped dataset read for the first time, no leak."""
    if "rss_shared_bytes" not in run.steps:
        return False
    shared = analyze_growth(run, "rss_shared_bytes")
    return shared.slope >= 0.5 * rss.slope


def _freed_kept(run: Run, rss: Growth) -> Finding | None:
    """RSS growth that the C heap's free bytes account for (FREED_KEPT_SHARE of its slope or more):
    memory freed and kept by malloc for reuse, fragmentation of the heap, no leak. None otherwise."""
    if "heap_free_bytes" not in run.steps:
        return None
    free = analyze_growth(run, "heap_free_bytes")
    if not free.slope >= FREED_KEPT_SHARE * rss.slope:
        return None
    why = (
        f"of it, the C heap's free bytes (memory freed and kept by malloc for reuse) rose "
        f"{fmt_bytes(free.slope, signed=True)} per step while its bytes in use stayed flat: the heap is "
        "fragmented, nothing is kept"
    )
    f = _finding(run, rss, Kind.FRAGMENTATION, FREED_KEPT_FIX)
    evidence = tuple(e for e in f.evidence if not e.startswith("at this rate"))  # it levels off: no projection
    return not_a_leak(dataclasses.replace(f, evidence=evidence), why, FREED_KEPT_FIX)


def _host_growth_is_tensors(run: Run, g: Growth | None, h: Growth) -> bool:
    """On a CPU run, tensors live in host memory: host growth that the leaking
    tensor series accounts for (half its slope or more) is that same leak."""
    return g is not None and g.leak and run.device.startswith("cpu") and g.slope >= 0.5 * h.slope
