"""Lifetimes that end: what separates a leak from memory that is given back.

Pure (no torch), used by the growth detector, the live check in the recorder, and
`run_detectors` (docs/detectors-growth.md, "Lifetimes that end"):

- memleak's own bookkeeping bytes on the host heap (the recorder measures them into
  the ``memleak_bytes`` column) are taken off the host series before they are judged
  (``run.own_adjusted``): the profiler's memory is never the user's leak.
- ``live_verdict``: the live check says "leak" only for growth that has lasted
  ``LIVE_MIN_STEPS`` steps and kept its slope since an earlier check found it; until
  then a filling cache and a leak look alike, and the answer is "inconclusive".
- ``gc_returned``: growth that one cyclic garbage collection gives back is garbage
  waiting for the collector, not a leak.
- ``detect``: a holder that fills during each epoch and is emptied at its end is
  bounded, unless what it holds carries autograd graphs: then its peak grows with
  the epoch's length, and it is a ``retained_graph`` at that holder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..records import HolderRow
from ..run import Run, own_adjusted, step_axis
from ..schema import Finding, Kind, Shape
from ..units import fmt_bytes
from .trend import kendall, theil

NAME = "lifetimes"
#: The live check calls a leak only after growth lasted this many steps after warm-up...
LIVE_MIN_STEPS = 48
#: ...and kept at least this share of its slope over the steps since an earlier check saw it.
LIVE_KEEP = 0.5
#: A collection that gives back this share of the growth since warm-up explains it.
GC_SHARE = 0.5
#: Fewest complete epochs (fill, then release) before a holder's sawtooth is judged.
MIN_TEETH = 2
#: ...or one, and the next epoch's filling seen on this many samples (its emptied one included).
REFILL_SAMPLES = 3


# ---------------------------------------------------------------- the live check
@dataclass(frozen=True)
class LiveState:
    """Growth an earlier live check saw but could not yet confirm."""

    column: str
    rows: int  # rows recorded at that check
    slope: float  # bytes per step then


def live_verdict(growth, y: np.ndarray, x: np.ndarray, pending: LiveState | None) -> tuple[str, LiveState | None]:
    """("leak" | "inconclusive" | "clean", the state for the next check) for one live check.

    `growth` is the growth detector's answer on the series so far; `x`, `y` are that series
    (adjusted as the detector saw it). A leak needs growth lasting LIVE_MIN_STEPS steps, seen
    by an earlier check, that kept LIVE_KEEP of its slope over the points since then."""
    if not growth.leak:
        return ("inconclusive" if growth.shape == Shape.LINEAR else "clean"), None
    now = LiveState(growth.column, len(y), growth.slope)
    if pending is None or pending.column != growth.column or growth.n_steps < LIVE_MIN_STEPS:
        return "inconclusive", now
    xs, ys = x[pending.rows - 1 :], y[pending.rows - 1 :]
    ok = np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    if len(ys) < 8:
        return "inconclusive", pending
    slope = theil(xs, ys)[0]
    tau, p = kendall(xs, ys)
    if slope >= LIVE_KEEP * pending.slope and tau > 0 and p < 0.01:
        return "leak", now
    return "inconclusive", now  # it slowed down or stopped since: a cache filling, not yet a leak


def gc_returned(slope: float, steps: float, before: float, after: float) -> bool:
    """Whether a garbage collection gave back most of the growth (`slope` bytes a step) over the
    `steps` since the check that first saw it (which collected once, so older garbage is gone)."""
    rise = slope * max(steps, 1.0)
    return rise > 0 and before - after >= GC_SHARE * rise


def explained(g, shape: Shape, why: str, confidence: float = 0.25):
    """Growth `g` (a `growth.Growth`) that something else explains: no leak, of `shape`, at most
    `confidence` sure, no projection, and `why` last in its evidence."""
    return replace(
        g,
        shape=shape,
        leak=False,
        confidence=min(g.confidence, confidence),
        steps_to_full=None,
        seconds_to_full=None,
        evidence=(*g.evidence, why),
    )


# ---------------------------------------------------------------- epochs that hold graphs
def detect(run: Run) -> list[Finding]:
    """RETAINED_GRAPH findings for holders that fill with graph-carrying tensors during each
    epoch and are emptied at its end (a sawtooth whose teeth hold autograd graphs)."""
    records = run.holders
    if len(records) < 5:
        return []
    steps = [r.step for r in records]
    by: dict[str, list[HolderRow | None]] = {}
    for i, r in enumerate(records):
        for row in r.holders:
            by.setdefault(row.holder, [None] * len(records))[i] = row
    out = []
    for name, rows in by.items():
        f = _graph_teeth(run, name, steps, rows)
        if f is not None:
            out.append(f)
    return out


def _teeth(count: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) sample indices of each complete tooth: the count rises, then falls to at most
    half its peak (emptied) on the next sample."""
    teeth, start = [], 0
    for j in range(1, len(count)):
        if count[j] < count[j - 1] and count[j] <= 0.5 * count[j - 1]:
            if j - 1 > start and count[j - 1] > count[start]:
                teeth.append((start, j - 1))
            start = j
    return teeth


def _refilling(count: np.ndarray, nodes: np.ndarray, grad: np.ndarray, j: int) -> bool:
    """Whether the holder, emptied at sample `j`, fills again with graph-carrying tensors on every
    sample since (``REFILL_SAMPLES`` or more): the next epoch under way, as the first one did. A short
    run sees one complete epoch; with the next one filling the same way, that one is enough."""
    c, n = count[j:], nodes[j:]
    if len(c) < REFILL_SAMPLES or grad[-1] <= 0:
        return False
    return bool(np.all(np.diff(c) > 0) and np.all(np.diff(n) > 0))


def _graph_teeth(run: Run, name: str, steps: list[int], rows: list[HolderRow | None]) -> Finding | None:
    count = np.array([float(r.count) if r is not None else 0.0 for r in rows])
    nodes = np.array([float(r.nodes or 0) if r is not None else 0.0 for r in rows])
    grad = np.array([float(r.grad or 0) if r is not None else 0.0 for r in rows])
    teeth = _teeth(count)
    if not teeth or (len(teeth) < MIN_TEETH and not _refilling(count, nodes, grad, teeth[-1][1] + 1)):
        return None
    if not all(grad[b] > 0 and nodes[b] > nodes[a] for a, b in teeth):
        return None  # detached outputs kept for an epoch: bounded by the epoch, not a leak
    starts = [steps[a] for a, _ in teeth]
    period = (
        float(np.median(np.diff(starts))) if len(starts) > 1 else float(steps[teeth[0][1]] - steps[teeth[0][0]] + 1)
    )
    accumulation = _optimizer_period(run)
    gap = float(np.median(np.diff(steps))) if len(steps) > 1 else 1.0  # what a sampled period may be off by
    if accumulation >= 2 and abs(period - accumulation) <= max(gap, 0.5):
        return None  # the losses of a gradient-accumulation window, one backward each: bounded by it
    per_step = _tooth_slope(run, steps, teeth)
    peak = per_step * period
    held = [int(count[b]) for _, b in teeth]
    where = "the attribute" if "." in name else "the variable"
    evidence = (
        f"{where} {name} fills during each epoch of about {period:.0f} steps and is emptied at its end "
        f"({_epochs(len(teeth))} seen, up to {max(held)} tensors each), but the tensors it keeps carry their "
        f"autograd graphs (up to {int(max(nodes[b] for _, b in teeth))} graph nodes per epoch)",
        f"memory held rises by {fmt_bytes(per_step)} per step within each epoch: the peak is about "
        f"{fmt_bytes(peak)} at {period:.0f} steps per epoch and grows with the epoch's length "
        f"(at 10x as many steps per epoch, about {fmt_bytes(10 * peak)})",
    )
    fix = (
        f"`{name}` keeps each step's tensors with their autograd graphs until the epoch ends: keep numbers "
        f"(`loss.item()`) or detached tensors (`out.detach()`), so that each step's graph is freed after its "
        f"backward; if one backward over the whole epoch is intended, accumulate gradients per step instead."
    )
    return Finding(
        detector=NAME,
        kind=Kind.RETAINED_GRAPH,
        location=name,
        bytes_per_step=per_step,
        total_bytes=peak,
        confidence=0.8,
        evidence=evidence,
        fix=fix,
        leak=True,
        data={"period_steps": period, "epochs": len(teeth), "peak_bytes": peak},
    )


def _optimizer_period(run: Run) -> float:
    """Steps between optimizer steps (the median gap; 0 where fewer than two were seen): more than
    one when several steps (micro-batches) make one optimizer step."""
    if "optimizer_steps" not in run.steps:
        return 0.0
    s = run.steps[["step", "optimizer_steps"]].dropna()
    at = s["step"][s["optimizer_steps"].diff() > 0].to_numpy()  # the steps an optimizer step ended
    return float(np.median(np.diff(at))) if len(at) >= 2 else 0.0


def _epochs(n: int) -> str:
    return "1 epoch and the next one filling" if n == 1 else f"{n} epochs"


def _tooth_slope(run: Run, steps: list[int], teeth: list[tuple[int, int]]) -> float:
    """Median rise per step of the primary memory series within the teeth (the graphs' bytes,
    which the holder's own tensor bytes do not show)."""
    col = run.memory_column()
    if col is None:
        return 0.0
    x = step_axis(run.steps)
    y = np.asarray(run.steps[col], dtype=float)
    slopes = []
    for a, b in teeth:
        m = (x >= steps[a]) & (x <= steps[b]) & np.isfinite(y)
        if m.sum() >= 2:
            slopes.append(theil(x[m], y[m])[0])
    return max(float(np.median(slopes)), 0.0) if slopes else 0.0


def live_series(steps, column: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(x, y) of `column` in the live check's table, as the growth detector judges it."""
    if column not in steps:
        return None, None
    x = step_axis(steps)
    y = np.asarray(steps[column], dtype=float)
    return x, own_adjusted(steps, column, y, np.arange(len(y)))


def ripe(pending: LiveState | None, rows: int) -> bool:
    """Whether a check now could confirm the pending growth (so it is worth one beyond the budget)."""
    return pending is not None and rows >= LIVE_MIN_STEPS and rows >= pending.rows + 8
