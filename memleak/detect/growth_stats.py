"""Robust trend statistics of one memory series after its warm-up (Theil-Sen line, Kendall's
tau, residual and step-to-step noise, step and jump fits), and the scores growth is judged by."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from .trend import kendall, theil

#: Kendall's tau must be significant at this level.
ALPHA = 0.001
#: The rise after the warm-up must be this many times the residual noise (robust SD), and a
#: share of the series' level (thresholds.MIN_REL_GROWTH).
NOISE_K = 5.0
#: Each half's slope must be at least SUSTAIN of the whole slope ("keeps its slope"), and
#: the second half's may not fall below SUSTAIN of the first's, nor below KEEP of it beyond
#: both slopes' 95 % intervals (a cache decelerates; a leak keeps its slope).
SUSTAIN = 0.3
KEEP = 0.5
#: A rise of which at most STEP_JUMPS jumps make STEP_SHARE is a few step-ups ("plateau"),
#: in the warm-up or after it; a gradual warm-up rise is a filling cache ("bounded").
STEP_JUMPS = 3
STEP_SHARE = 0.8
#: A jump (or drop) is a change of more than DROP_K step-to-step noise SDs.
DROP_K = 5.0
#: Points each side of a step needs before its own trend is tested.
MIN_SIDE = 6


@dataclass(frozen=True)
class Trend:
    """Robust trend statistics of one series."""

    slope: float
    intercept: float
    tau: float
    p: float
    noise: float  # robust SD of the residuals around the line
    rise: float  # slope times the x-span
    level: float  # median |value|
    slope_first: float  # Theil-Sen slope of the first half
    slope_second: float  # ... and of the second half
    decelerating: bool  # the second half's slope is well below the first's
    step_at: int | None  # where one step up fits the series at least as well as the line, if it does
    jumps: int  # jumps up beyond the step-to-step noise...
    jumps_rise: float  # ...and how much they rose in all


def noise_sd(a: np.ndarray, central: float = 0.9) -> float:
    """Robust SD from the `central` share of the values closest to their median: their mean
    absolute deviation, scaled to a normal SD. Unlike the MAD it stays above 0 for discrete
    allocator values, where over half of the deviations can be exactly 0."""
    dev = np.sort(np.abs(a - np.median(a)))
    k = max(1, int(central * dev.size))
    return float(dev[:k].mean()) / _mean_abs_central(central)


@functools.cache
def _mean_abs_central(central: float) -> float:
    """E|Z| over the `central` share of a standard normal closest to 0 (a constant; scipy's
    distribution calls are slow enough to matter in the live check)."""
    z = stats.norm.ppf((1 + central) / 2)
    return float(2 * (stats.norm.pdf(0) - stats.norm.pdf(z)) / central)


def fit_trend(x: np.ndarray, y: np.ndarray, floor: float) -> Trend:
    """All the statistics growth is judged on, for `y` over `x`; noise is never below `floor`."""
    slope, intercept, _, _ = theil(x, y)
    tau, p = kendall(x, y)
    noise = max(noise_sd(y - (intercept + slope * x)), floor)
    h = len(y) // 2
    first, _, low_first, _ = theil(x[:h], y[:h])
    second, _, _, high_second = theil(x[h:], y[h:])
    decelerating = second < SUSTAIN * first or (second < KEEP * first and high_second < low_first)
    d = np.diff(y)
    jumps = d[d > max(DROP_K * step_noise(y), floor)]
    return Trend(
        slope,
        intercept,
        tau,
        p,
        noise,
        slope * float(x[-1] - x[0]),
        float(np.median(np.abs(y))),
        first,
        second,
        decelerating,
        _step_fit(x, y),
        len(jumps),
        float(jumps.sum()),
    )


def _step_fit(x: np.ndarray, y: np.ndarray) -> int | None:
    """The index where a single step (two flat levels) fits `y` at least as well as a straight
    line does, by least squares; None when the line fits better. Short noisy series with one
    step up look like growth to a rank test; this tells them apart."""
    if np.ptp(x) == 0:
        return None
    y = y - np.median(y)  # keeps the cumulative sums of squares exact
    n = len(y)
    s1, s2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(1, n)  # the step comes before y[k]
    left = s2[k - 1] - s1[k - 1] ** 2 / k
    right = (s2[-1] - s2[k - 1]) - (s1[-1] - s1[k - 1]) ** 2 / (n - k)
    best = int(np.argmin(left + right))
    line = np.polyval(np.polyfit(x - x[0], y, 1), x - x[0])
    if left[best] + right[best] > float(np.sum((y - line) ** 2)):
        return None
    at = best + 1
    if _keeps_rising(x[:at], y[:at]) and _keeps_rising(x[at:], y[at:]):
        return None  # both levels rise on their own: steady growth with one jump in it, not a step
    return at


def _keeps_rising(x: np.ndarray, y: np.ndarray) -> bool:
    """A significant upward trend within one side of a step (a flat level has none)."""
    if len(y) < MIN_SIDE:
        return False
    tau, p = kendall(x, y)
    return tau > 0 and p < ALPHA


def growth_score(t: Trend, min_rel: float) -> float:
    """How far the rise clears the weakest of significance, noise and size (>= 1: growing)."""
    if t.slope <= 0 or not t.tau > 0:
        return 0.0
    significance = math.inf if t.p == 0 else math.log(t.p) / math.log(ALPHA)
    size = t.rise / (min_rel * t.level) if t.level > 0 and min_rel > 0 else math.inf
    return min(significance, t.rise / (NOISE_K * t.noise), size)


def sustain_score(t: Trend) -> float:
    """>= 1 when both halves keep at least SUSTAIN of the slope, it does not decelerate, and
    the rise is not one step or a few jumps."""
    if t.slope <= 0 or t.decelerating or t.step_at is not None or few_jumps(t):
        return 0.0
    return min(t.slope_first, t.slope_second) / (SUSTAIN * t.slope)


def few_jumps(t: Trend) -> bool:
    """At most STEP_JUMPS jumps made STEP_SHARE of the rise: a few step-ups (new allocator
    blocks, a lazily built buffer), not steady growth."""
    return 0 < t.jumps <= STEP_JUMPS and t.jumps_rise >= STEP_SHARE * t.rise


def falling(t: Trend, min_rel: float) -> bool:
    """A fall that would count as growth if it went up."""
    return growth_score(replace(t, slope=-t.slope, tau=-t.tau, rise=-t.rise), min_rel) >= 1


def step_noise(y: np.ndarray) -> float:
    """SD of the step-to-step changes. Up to half the steps of a sawtooth or a staircase
    are its own jumps: the noise is in the others."""
    return noise_sd(np.diff(y), central=0.4)
