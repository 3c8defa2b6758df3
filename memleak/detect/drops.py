"""Why memory fell suddenly: findings that explain a drop, never suspects of a leak.

Pure over ``run.steps`` and events. A drop is a fall from one step to the next larger than the
step-to-step noise allows (growth_stats.DROP_K) and than MIN_DROP of the level. Each is
explained by what the run recorded at that step, most specific first:

- the allocator gave up everything it held (allocated and reserved near zero): a CUDA context
  reset after an error, or every tensor released;
- reserved memory fell and allocated did not: ``torch.cuda.empty_cache()``, or the allocator
  freeing its cache to retry an allocation (``num_alloc_retries`` rose);
- a full collection of Python's cyclic garbage collector ran in that step (``gc_collections``
  rose): the memory was held by reference cycles; the census's cycle marks name them;
- new DataLoader workers started: a new epoch began;
- AMP's GradScaler lowered its scale (``grad_scale`` fell): it skipped that optimizer step;
- ``optimizer.step()`` ran in that step while the steps are micro-batches: the end of a
  gradient-accumulation window.

Drops spaced regularly (three or more) are one sawtooth finding, with the cause they share.
"""

from __future__ import annotations

import numpy as np

from ..run import Run, step_axis
from ..schema import Finding, Kind, to_jsonable
from ..units import fmt_bytes
from .growth_shape import MAX_CYCLE_CV
from .growth_stats import DROP_K, step_noise

NAME = "drops"
#: A drop is at least this share of the series' level.
MIN_DROP = 0.01
#: Near zero: what is left after a context reset, as a share of what was held.
RESET_LEFT = 0.05
#: Reserved fell, allocated fell by less than this share of it: the cache was released.
CACHE_SHARE = 0.2
#: At most this many single drops are reported one by one.
MAX_REPORTED = 5


def detect(run: Run) -> list[Finding]:
    column = run.memory_column()
    if column is None:
        return []
    steps = run.steps
    found = _drops(steps, column)
    if "reserved_bytes" in steps and column != "reserved_bytes":
        found |= _drops(steps, "reserved_bytes")
    if not found:
        return []
    drops = sorted(found)
    causes = {j: _cause(run, column, j) for j in drops}
    out = []
    cycle = _sawtooth(steps, drops)
    if cycle:
        out.append(_sawtooth_finding(run, column, drops, causes))
    else:
        for j in sorted(drops, key=lambda j: _fall(steps, column, j), reverse=True)[:MAX_REPORTED]:
            cause = causes[j]
            if cause is not None:
                out.append(_drop_finding(run, column, j, cause))
    return out


def _series(steps, column: str) -> np.ndarray:
    return np.asarray(steps[column], dtype=float)


def _drops(steps, column: str) -> set[int]:
    """Row positions j where `column` fell suddenly from row j-1 (missing values skipped)."""
    y = _series(steps, column)
    rows = np.flatnonzero(np.isfinite(y))
    if len(rows) < 3:
        return set()
    v = y[rows]
    threshold = max(DROP_K * step_noise(v), MIN_DROP * float(np.median(np.abs(v))), 1.0)
    return {int(rows[k + 1]) for k in np.flatnonzero(np.diff(v) < -threshold)}


def _fall(steps, column: str, j: int) -> float:
    """How much `column` fell into row j from its last value before (0 without the column)."""
    if column not in steps:
        return 0.0
    y = _series(steps, column)
    before = y[:j][np.isfinite(y[:j])]
    return float(before[-1] - y[j]) if before.size and np.isfinite(y[j]) else 0.0


def _rose(steps, column: str, j: int) -> float:
    """How much a cumulative counter went up in row j (0 without it)."""
    if column not in steps or j <= 0 or j >= len(steps):
        return 0.0
    a, b = steps[column].iloc[j - 1], steps[column].iloc[j]
    return float(b - a) if np.isfinite(a) and np.isfinite(b) else 0.0


def _cause(run: Run, column: str, j: int) -> tuple[str, str] | None:
    """(cause, plain words) for the drop into row j, or None when nothing recorded explains it."""
    steps = run.steps
    step = int(step_axis(steps)[j])
    alloc, reserved = _fall(steps, "allocated_bytes", j), _fall(steps, "reserved_bytes", j)
    if "allocated_bytes" in steps and "reserved_bytes" in steps and j > 0:
        held = float(steps["reserved_bytes"].iloc[j - 1])
        if held > 0 and steps["reserved_bytes"].iloc[j] <= RESET_LEFT * held and reserved > 0:
            return "reset", (
                f"at step {step} the allocator gave up nearly everything it held ({fmt_bytes(held)} reserved "
                "before): the CUDA context was reset after a CUDA error, or every tensor was released at once"
            )
        if reserved > 0 and alloc < CACHE_SHARE * reserved:
            retry = _rose(steps, "num_alloc_retries", j) > 0
            return "empty_cache", (
                f"at step {step} reserved memory fell by {fmt_bytes(reserved)} while allocated memory fell by "
                f"{fmt_bytes(max(alloc, 0.0))}: the allocator's cache was released, not tensors"
                + (
                    " (num_alloc_retries rose: the allocator freed its cache to retry an allocation that "
                    "failed: memory is tight)"
                    if retry
                    else " (torch.cuda.empty_cache() was called)"
                )
            )
    fell = [k for k in (j, j + 1) if _rose(steps, "grad_scale", k) < 0]  # on CUDA it is read a step late
    if fell:
        scale = steps["grad_scale"]
        return "scaler", (
            f"at step {step} AMP's GradScaler lowered its scale from {scale.iloc[fell[0] - 1]:g} to "
            f"{scale.iloc[fell[0]]:g}: the gradients had inf or NaN values, so it skipped optimizer.step() "
            "(no update, no optimizer temporaries) and backs off"
        )
    if _rose(steps, "gc_collections", j) > 0:
        freed = _rose(steps, "gc_collected", j)
        by = " (memleak's live check ran it)" if any(_at(e, "gc_returned", step) for e in run.events) else ""
        return "gc", (
            f"at step {step} a full collection of Python's cyclic garbage collector ran{by} and freed "
            f"{freed:,.0f} objects: the memory was held by reference cycles, which only that collector frees"
            + _cycles(run, step)
        )
    loader = [e for e in run.events if _at(e, "dataloader_workers", step) and e.get("step", 0) > 0]
    if loader:
        return "epoch", (
            f"at step {step} DataLoader `{loader[0].get('loader')}` started new workers: a new epoch began, "
            "and what the last epoch held was released"
        )
    if _rose(steps, "optimizer_steps", j) > 0 and _micro_batches(steps):
        return "accumulation", (
            f"optimizer.step() ran at step {step} and the steps are micro-batches: the end of a "
            "gradient-accumulation window (zero_grad released the gradients)"
        )
    return None


def _at(e: dict, name: str, step: int) -> bool:
    return e.get("event") == name and e.get("step") == step


def _micro_batches(steps) -> bool:
    """Fewer optimizer steps than steps: several steps make one optimizer step."""
    s = steps["optimizer_steps"].dropna()
    return len(s) >= 2 and float(s.iloc[-1] - s.iloc[0]) < 0.75 * (len(s) - 1)


def _cycles(run: Run, step: int) -> str:
    """The cycles the census saw before the drop, by creation site."""
    births = [b for b in run.births if b.step < step]
    if not births:
        return ""
    sites = sorted({f"{c.site} ({c.cycle})" for c in births[-1].cohorts if c.cycle})
    if not sites:
        return ""
    return "; the census saw tensors kept by cycles, created at " + ", ".join(sites[:3])


def _sawtooth(steps, drops: list[int]) -> bool:
    """Three or more drops spaced regularly over at least half the run."""
    if len(drops) < 3:
        return False
    gaps = np.diff(drops)
    return bool(gaps.std() <= MAX_CYCLE_CV * gaps.mean() and drops[-1] - drops[0] >= len(steps) / 2)


def _sawtooth_finding(run: Run, column: str, drops: list[int], causes) -> Finding:
    steps = run.steps
    x = step_axis(steps)
    period = float(np.median(np.diff(x[drops])))
    swing = float(np.median([_fall(steps, column, j) for j in drops]))
    kinds = [c[0] for c in causes.values() if c is not None]
    shared = max(set(kinds), key=kinds.count) if kinds else None
    why = {
        "accumulation": "each drop falls on an optimizer.step(): the end of a gradient-accumulation window",
        "epoch": "each drop falls where DataLoader workers restart: the end of an epoch",
        "gc": "each drop falls on a full garbage collection: reference cycles pile up between collections",
        "empty_cache": "each drop is the allocator's cache released (torch.cuda.empty_cache())",
    }.get(
        shared or "", "something is filled and emptied every cycle (gradient accumulation, an epoch, a buffer cleared)"
    )
    at = ", ".join(f"{x[j]:.0f}" for j in drops[:6]) + (", ..." if len(drops) > 6 else "")
    evidence = (
        f"{column} rises and falls in cycles of about {period:.0f} steps: {len(drops)} drops of about "
        f"{fmt_bytes(swing)} (at steps {at})",
        f"{why}" + (f" ({kinds.count(shared)} of {len(drops)} drops)" if shared else ""),
        "a sawtooth is no leak while the low point of each cycle stays level (the growth detector judges that)",
    )
    return _finding("memory drops: a sawtooth", column, swing, swing * len(drops), evidence, period, drops, x, shared)


def _drop_finding(run: Run, column: str, j: int, cause: tuple[str, str]) -> Finding:
    x = step_axis(run.steps)
    if _fall(run.steps, column, j) <= 0 and "reserved_bytes" in run.steps:
        column = "reserved_bytes"  # the cache fell, not the tensors
    fall = _fall(run.steps, column, j)
    where = f"memory drop at step {x[j]:.0f}"
    evidence = (f"{column} fell by {fmt_bytes(fall)} from step {x[j - 1]:.0f} to step {x[j]:.0f}", cause[1])
    return _finding(where, column, fall, fall, evidence, None, [j], x, cause[0])


def _finding(location, column, fall, total, evidence, period, drops, x, cause=None) -> Finding:
    return Finding(
        detector=NAME,
        kind=Kind.MEMORY_DROP,
        location=location,
        bytes_per_step=-float(fall),
        total_bytes=float(total),
        confidence=1.0,
        evidence=tuple(evidence),
        fix="nothing: memory was given back, and this says why",
        leak=False,
        note=True,
        data=to_jsonable({"column": column, "cause": cause, "period": period, "steps": [x[j] for j in drops]}),
    )
