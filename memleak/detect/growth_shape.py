"""The shape of a memory series after its warm-up (found from the data): linear growth, or a
rise that is no leak (bounded, plateau), a sawtooth judged on its per-cycle minima, a lasting
release (drop), or flat."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..schema import Shape
from ..units import fmt_bytes
from .growth_stats import (
    ALPHA,
    DROP_K,
    NOISE_K,
    STEP_JUMPS,
    STEP_SHARE,
    Trend,
    falling,
    few_jumps,
    fit_trend,
    growth_score,
    noise_sd,
    step_noise,
    sustain_score,
)
from .trend import theil

#: Fewer usable points than this after the warm-up: "too_short" (inconclusive).
MIN_POINTS = 8
#: Warm-up points deviate from the steady-state line by more than this many noise SDs.
WARMUP_K = 4.0
#: A drop gives back at least RELEASE_FRAC of the rise since the previous drop.
RELEASE_FRAC = 0.5
#: A release lasts: the median of the LASTING points after it is below that of those before.
LASTING = 5
#: Drops spaced this regularly (coefficient of variation of their spacing) make a sawtooth.
MAX_CYCLE_CV = 0.35


@dataclass(frozen=True)
class Verdict:
    """The shape of the analysed part, whether it leaks, and the notes that say why."""

    shape: Shape
    leak: bool
    start: int  # index (into the post-warm-up points) where the analysed part begins
    trend: Trend
    score: float  # evidence of a leak; >= 1 when every criterion holds
    notes: tuple[str, ...] = ()


def warmup_length(x: np.ndarray, y: np.ndarray, floor: float) -> int:
    """Points to skip: the prefix (within the first half) whose points are mostly outliers
    to the steady state. A point is an outlier when it is far from both a robust line through
    the second half and one through the whole series (either alone may be tilted by chance
    or by the warm-up itself)."""
    h = len(y) // 2
    outlier = np.ones(h, dtype=bool)
    for part in (slice(h, None), slice(None)):
        slope, intercept, _, _ = theil(x[part], y[part])
        r = y - (intercept + slope * x)
        noise = max(noise_sd(r[h:]), floor)
        outlier &= np.abs(r[:h] - np.median(r[h:])) > WARMUP_K * noise
    score = np.cumsum(np.where(outlier, 1, -1))  # +1 per outlier, -1 per inlier
    return int(np.argmax(score)) + 1 if score.size and score.max() > 0 else 0


def classify(x: np.ndarray, y: np.ndarray, floor: float, min_rel: float) -> Verdict:
    """The shape of the series after its warm-up: a sawtooth, a release (and growth after it), or
    whatever _judge finds in the series as a whole."""
    # white noise around a line is at least its step-to-step noise / sqrt(2): measured on the
    # whole post-warm-up series, this keeps short parts (cycle minima, a late half) from
    # underestimating their noise
    floor = max(floor, step_noise(y) / math.sqrt(2))
    drops, threshold = _drops(y, floor)
    if len(drops) >= 3 and _regular(drops, len(y)):
        return _judge_cycles(x, y, drops, floor, min_rel)
    # a release is as large as a rise that would count as growth, and lasts
    size = max(threshold, min_rel * float(np.median(np.abs(y))))
    releases = [j for j in drops if _lasting(y, j, size)]
    if not releases:
        return _judge(x, y, floor, min_rel)
    j = releases[-1]
    note = (
        f"memory fell by {fmt_bytes(y[j - 1] - y[j])} at step {x[j]:.0f} "
        f"(from {fmt_bytes(y[j - 1])} to {fmt_bytes(y[j])}) and stayed down: it was released"
    )
    if len(releases) > 1:  # a buffer flushed now and then: each fall ends a rise, none is the last word
        falls = ", ".join(f"{fmt_bytes(y[i - 1] - y[i])} at step {x[i]:.0f}" for i in releases[-3:])
        note = f"memory fell back {len(releases)} times ({falls}): what it gained was released each time"
    # growth may have resumed after the release: judge it once it has lasted longer
    # than the rise before the release did (else it may be just another cycle)
    if len(y) - j >= MIN_POINTS and len(y) - j > j - (releases[-2] if len(releases) > 1 else 0):
        after = _judge(x[j:], y[j:], floor, min_rel)
        if after.leak:
            return replace(after, start=after.start + j, notes=(note + "; it grows again after that",) + after.notes)
    t = fit_trend(x, y, floor)
    return Verdict(Shape.DROP, False, 0, t, 0.0, (note,))


def _judge(x: np.ndarray, y: np.ndarray, floor: float, min_rel: float, late: bool = True) -> Verdict:
    """Linear growth, a rise that is not a leak (bounded, plateau), a fall, or flat."""
    t = fit_trend(x, y, floor)
    grow = growth_score(t, min_rel)
    score = min(grow, sustain_score(t))
    if score >= 1:
        return Verdict(Shape.LINEAR, True, 0, t, score)
    h = len(y) // 2
    if late and t.slope_second > max(t.slope_first, 0) and len(y) - h >= MIN_POINTS:
        later = _judge(x[h:], y[h:], floor, min_rel, late=False)
        if later.leak:  # growth that started late: the first half was still warm-up
            return replace(
                later,
                start=later.start + h,
                notes=later.notes + (f"the growth started after step {x[h]:.0f}; it was flat before",),
            )
    if grow >= 1 or (t.p < ALPHA and t.tau > 0):
        return _rise_not_leak(x, y, t, grow, score)
    if falling(t, min_rel):
        return Verdict(
            Shape.DROP, False, 0, t, 0.0, (f"memory falls by {fmt_bytes(-t.slope)}/step: it is being released",)
        )
    return Verdict(Shape.FLAT, False, 0, t, grow)


def _rise_not_leak(x, y, t: Trend, grow: float, score: float) -> Verdict:
    """Memory went up, but not steadily: it saturates, stepped up once, or is not yet confirmed."""
    if t.decelerating:
        return Verdict(
            Shape.BOUNDED,
            False,
            0,
            t,
            score,
            (
                f"the slope fell from {fmt_bytes(t.slope_first, signed=True)}/step in the first half to "
                f"{fmt_bytes(t.slope_second, signed=True)}/step in the second: it saturates, like a cache filling up",
            ),
        )
    if t.step_at is not None:
        j = t.step_at
        rise = float(np.mean(y[j:]) - np.mean(y[:j]))
        return Verdict(
            Shape.PLATEAU,
            False,
            0,
            t,
            score,
            (
                f"memory stepped up by {fmt_bytes(rise)} at step {x[j]:.0f} rather than growing steadily: "
                "one step fits the series as well as a straight line",
            ),
        )
    if few_jumps(t):
        return Verdict(
            Shape.PLATEAU,
            False,
            0,
            t,
            score,
            (f"memory rose in {t.jumps} jump(s) of {fmt_bytes(t.jumps_rise)} in all rather than steadily",),
        )
    if grow >= 1:
        return Verdict(
            Shape.LINEAR,
            False,
            0,
            t,
            score,
            ("memory grows, but not steadily enough across the two halves to confirm a leak yet",),
        )
    creeps = "memory creeps up, too little for this series alone to count as growth"
    return Verdict(Shape.BOUNDED, False, 0, t, score, (creeps,))


def _drops(y: np.ndarray, floor: float) -> tuple[list[int], float]:
    """Indices j where memory falls from y[j-1] to y[j] by more than the step-to-step noise
    allows, giving back at least RELEASE_FRAC of what it rose since the previous drop."""
    threshold = max(DROP_K * step_noise(y), floor)
    drops: list[int] = []
    cycle_start = 0
    for j in np.flatnonzero(np.diff(y) < -threshold) + 1:
        rise = y[j - 1] - y[cycle_start:j].min()
        if y[j - 1] - y[j] >= RELEASE_FRAC * rise:
            drops.append(int(j))
            cycle_start = int(j)
    return drops, threshold


def _regular(drops: list[int], n: int) -> bool:
    """Drops evenly spaced over at least half the series: cycles, not a burst."""
    gaps = np.diff(drops)
    return bool(gaps.std() <= MAX_CYCLE_CV * gaps.mean() and drops[-1] - drops[0] >= n / 2)


def _lasting(y: np.ndarray, j: int, size: float) -> bool:
    """The level after the drop stays `size` below the level before it: not a dip or a spike."""
    return bool(np.median(y[j : j + LASTING]) < np.median(y[max(j - LASTING, 0) : j]) - size)


def _judge_cycles(x, y, drops, floor, min_rel) -> Verdict:
    """A sawtooth (e.g. gradient accumulation): a leak raises the per-cycle minima. Growth
    of the series itself far beyond the sawtooth's own swing counts too."""
    bounds = [0, *drops, len(y)]
    low = [a + int(np.argmin(y[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)]
    period = float(np.median(np.diff(x[drops])))
    swing = float(np.median(y[np.array(drops) - 1] - y[drops]))
    note = (
        f"memory rises and falls in cycles of about {period:.0f} steps ({len(drops)} drops of "
        f"{fmt_bytes(swing)}, e.g. gradient accumulation)"
    )
    minima = _judge(x[low], y[low], floor, min_rel, late=False) if len(low) >= MIN_POINTS else None
    if minima is not None and minima.leak:
        return replace(minima, notes=(note + f"; the {len(low)} per-cycle minima keep rising",))
    whole = _judge(x, y, floor, min_rel)
    if whole.leak:
        return replace(whole, notes=whole.notes + (note + "; the growth is far larger than the swing",))
    judged = (
        f"; the {len(low)} per-cycle minima do not keep rising"
        if minima is not None
        else f"; too few cycles ({len(low)}) to judge their minima (need {MIN_POINTS})"
    )
    t = minima.trend if minima is not None else whole.trend
    return Verdict(
        Shape.SAWTOOTH, False, 0, t, min(v.score for v in (minima, whole) if v is not None), (note + judged,)
    )


def label_warmup(v: Verdict, y: np.ndarray, w: int, warmup_rows: int) -> Verdict:
    """A flat series after a warm-up that rose: a step-up (plateau), when a few jumps make
    most of the rise, or a gradual fill (bounded, like a cache)."""
    if v.shape != Shape.FLAT or w == 0:
        return v
    rise = float(np.median(y[w:]) - y[:w].min())
    if rise <= NOISE_K * v.trend.noise:
        return v
    jumps = np.sort(np.diff(y[: w + 1]))[-STEP_JUMPS:]
    if jumps.sum() >= STEP_SHARE * rise:
        return replace(
            v,
            shape=Shape.PLATEAU,
            notes=v.notes
            + (
                f"memory stepped up by {fmt_bytes(rise)} during the first {warmup_rows} steps "
                "(e.g. optimizer state created at the first step), then stayed flat",
            ),
        )
    return replace(
        v,
        shape=Shape.BOUNDED,
        notes=v.notes
        + (
            f"memory rose gradually by {fmt_bytes(rise)} over the first {warmup_rows} steps, then stayed flat "
            "(e.g. a cache filling up)",
        ),
    )
