"""Growth across the TensorProbe's sampled deep steps: too few points for a significance
test, so growth is a rise that is mostly monotone and still climbing in the second half, and
that has not stopped for its last stretch of samples (a cache that filled to its capacity), nor
falls back to its low again and again (a state filled each epoch and emptied at its end)."""

from __future__ import annotations

import itertools

import numpy as np

from .trend import kendall

#: Fewest samples (deep steps) on which a growth can be judged.
MIN_SAMPLES = 3
#: Tensors a holder must gain over the run before its count counts as growth.
MIN_COUNT_RISE = 2
#: A flat stretch at the end stops a growth when, at the rate before it, the series would have
#: gained this many times its smallest rise there (a steady leak gains it; a full cache gains nothing).
PLATEAU_MIN_RISES = 2.0
#: ... and at least this share of what it gained before the stretch.
PLATEAU_SHARE = 0.25
#: Sizes that merely vary (one tensor a step of a random length) rise on a few samples by chance;
#: a size that grows sets a new high on most samples, or trends for long (this many samples, at
#: a Kendall p-value this small).
NEW_HIGH_SHARE = 0.75
LONG_TREND_SAMPLES = 8
LONG_TREND_P = 0.001
#: A fall back to at most this share of what a cycle gained above its low empties the cycle ...
REFILL_SHARE = 0.5
#: ... and this many such falls make the series a fill-and-empty cycle, judged on its lows.
MIN_REFILLS = 2
#: The lows of a cycle that leaks rise by this share of a cycle's swing at least.
LOW_RISE_SHARE = 0.25
#: A staircase (something kept every few steps, sampled more often: flat treads between rises)
#: grows when it never falls, rose on this many samples at least...
MIN_STAIRS = 3
#: ...and gained this share of its rise in the later half of its span at least (a cache filling
#: at the start gains nothing there, a set of shapes seen gains ever less).
STAIR_LATE_SHARE = 0.3
#: A flat stretch at the end of a staircase is a tread, not a plateau, while it is shorter than
#: this many of its treads (the median steps between two rises).
STAIR_TREADS = 2.0
#: A series whose rate over the later half of its span (in steps) is at most this share of its
#: rate over the earlier half has all but stopped: a cache of a finite set of keys filling up
#: (token ids, length buckets, a dataset cached in its first epoch); a leak keeps its rate.
DECELERATED_SHARE = 0.2


#: Samples since a holder last shrank, at least, for the growth since to be judged on its own (`late_rise`).
LATE_SAMPLES = 4
#: And how far past the most it held before that growth must go.
LATE_PEAK = 1.5


def late_rise(steps: list[int], values: list[float]) -> int:
    """Where a holder that shrank again and again (a buffer filled and emptied) stopped being emptied:
    the index after its last fall, when the samples since are LATE_SAMPLES or more, span more steps
    than any fill before, and rise past LATE_PEAK times the most it held before; else 0. A late leak
    in a container that was a bounded sawtooth is judged from there (the whole series never rises
    steadily); an epoch's outputs still filling at the run's end are no longer than the fills before."""
    v = np.asarray(values, dtype=float)
    falls = np.flatnonzero(np.diff(v) < 0)
    if not len(falls):
        return 0
    k = int(falls[-1]) + 1
    if len(v) - k < LATE_SAMPLES or v[k:].max() <= LATE_PEAK * max(v[:k].max(), 1.0):
        return 0
    bounds = [0, *(int(i) + 1 for i in falls)]
    longest = max(steps[b - 1] - steps[a] for a, b in itertools.pairwise(bounds))
    return k if steps[-1] - steps[k] > longest else 0


def sustained_rise(steps: list[int], values: list[float], min_rise: float, rel_rise: float = 0.0) -> dict | None:
    """Monotone, sustained growth of `values` over `steps`; None when it does not grow."""
    n = len(values)
    if n < MIN_SAMPLES:
        return None
    v = np.asarray(values, dtype=float)
    x = np.asarray(steps, dtype=float)
    rise = v[-1] - v[0]
    threshold = max(min_rise, rel_rise * max(abs(v[0]), 1.0))
    if rise < threshold:
        return None
    if refills_level(v, threshold):
        return None
    # where it started rising: a holder that filled only from a late step on (a leak that began
    # halfway) is judged from the last sample of its flat start, not diluted by the flat samples
    k = int(np.flatnonzero(v <= v[0])[-1])
    start = k if n - k >= MIN_SAMPLES and bool((v[: k + 1] == v[0]).all()) else 0
    tail = v[start:]
    d = np.diff(tail)
    m = len(tail)
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    stairs = staircase(x[start:], tail, pos, neg)
    if not stairs and (pos < max(2, 0.5 * (m - 1)) or neg > 0.25 * (m - 1)):
        return None
    mid = m // 2
    if not (tail[-1] > tail[mid] and tail[mid] >= tail[0]):  # still growing in the second half: not a filling cache
        return None
    if plateaued(x, v, min_rise) or decelerated(x, v, min_rise):
        return None
    slope = _theil(x[k:], v[k:]) if n - k >= 2 else _theil(x, v)
    mono = max(pos / (m - 1), 0.5 if stairs else 0.0)
    conf = 0.5 + 0.45 * min(1.0, mono * min(1.0, (m - 1) / 5))
    return {
        "slope": slope,
        "rise": float(rise),
        "first": float(v[0]),
        "last": float(v[-1]),
        "n": m,
        "confidence": round(conf, 3),
        "span": int(x[-1] - x[0]),
    }


def refills_level(values, min_rise: float) -> bool:
    """Whether the series is a fill-and-empty cycle that does not leak: it falls back most of the
    way to its low (``REFILL_SHARE`` of the cycle's gain or less) ``MIN_REFILLS`` times or more,
    and the lows of its later cycles are not above those of its earlier ones by `min_rise` and by
    ``LOW_RISE_SHARE`` of a cycle's swing (the lows are sampled at irregular steps: each is late in
    its cycle by a few steps). A metric's list states appended each step and reset at each epoch's
    end, or outputs kept for an epoch: drops are a few of many samples, and a sample late in a cycle
    looks like a rise. A leak under the cycle (something kept from every epoch) raises the lows."""
    v = np.asarray(values, dtype=float)
    lows: list[float] = []
    swings: list[float] = []
    low = peak = float(v[0])
    for x in v[1:]:
        if peak - low >= min_rise and x - low <= REFILL_SHARE * (peak - low):
            lows.append(low)  # the cycle is emptied: a new one starts at x
            swings.append(peak - low)
            low = peak = float(x)
        else:
            low, peak = min(low, float(x)), max(peak, float(x))
    if len(lows) < MIN_REFILLS:
        return False
    lows.append(low)
    half = len(lows) // 2
    raised = float(np.median(lows[-half:]) - np.median(lows[:half]))
    return raised < max(min_rise, LOW_RISE_SHARE * float(np.median(swings)))


def staircase(x: np.ndarray, v: np.ndarray, pos: int, neg: int) -> bool:
    """Whether the series grows by steps: it never falls, rose on ``MIN_STAIRS`` samples or more
    with flat treads between (the samples come more often than what is kept), and gained
    ``STAIR_LATE_SHARE`` of its rise in the later half of its span (the rises are spread over the
    run, not a cache filled at the start). A loss kept with its graph every log interval."""
    if neg or pos < MIN_STAIRS:
        return False
    late = v[-1] - v[int(np.searchsorted(x, (x[0] + x[-1]) / 2, side="right")) - 1]
    return bool(late >= STAIR_LATE_SHARE * (v[-1] - v[0]))


def _tread(x: np.ndarray, v: np.ndarray) -> float:
    """The median steps between two rises of a series that never falls and stayed flat on half
    its samples or more (0: fewer than ``MIN_STAIRS`` rises, a fall, or no treads)."""
    d = np.diff(v)
    up = x[1:][d > 0]
    if (d < 0).any() or len(up) < MIN_STAIRS or len(up) > 0.5 * len(d):
        return 0.0
    return float(np.median(np.diff(up)))


def _theil(x: np.ndarray, v: np.ndarray) -> float:
    """Theil-Sen slope per step (the median of the pairwise slopes)."""
    n = len(v)
    slopes = [(v[j] - v[i]) / (x[j] - x[i]) for i in range(n) for j in range(i + 1, n) if x[j] > x[i]]
    return float(np.median(slopes)) if slopes else 0.0


def plateaued(steps, values, min_rise: float) -> bool:
    """Whether the series ends in a flat stretch (two sampled intervals or more, none rising) so
    long that, at the rate it grew before, it would have gained clearly more than nothing: it
    filled and stopped (a replay buffer, a cache at its capacity), it does not leak. A staircase's
    stretch shorter than ``STAIR_TREADS`` of its treads is the next tread, not a stop."""
    x, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    start = len(v) - 1
    while start > 0 and v[start - 1] >= v[start]:
        start -= 1
    if len(v) - 1 - start < 2 or start < 2:  # a stretch of two intervals, after a rise of two
        return False
    tread = _tread(x[: start + 1], v[: start + 1])
    if tread > 0 and x[-1] - x[start] < STAIR_TREADS * tread:
        return False
    before = _theil(x[: start + 1], v[: start + 1])
    return _would_have_gained(before * (x[-1] - x[start]), v[start] - v[0], min_rise)


def decelerated(steps, values, min_rise: float) -> bool:
    """Whether the series gained, over the later half of its span in steps, at most
    ``DECELERATED_SHARE`` of what its earlier half's rate would have given there, and that would
    have been clearly more than nothing (as for `plateaued`). Halves by steps, not samples: the
    young steps are sampled densely, the later ones sparsely."""
    x, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    m = int(np.searchsorted(x, (x[0] + x[-1]) / 2, side="right")) - 1  # the last sample of the earlier half
    if m <= 0 or m >= len(v) - 1:
        return False
    gained = v[m] - v[0]
    expected = gained / (x[m] - x[0]) * (x[-1] - x[m]) if gained > 0 else 0.0  # at the earlier half's rate
    return _would_have_gained(expected, gained, min_rise) and v[-1] - v[m] <= DECELERATED_SHARE * expected


def _would_have_gained(expected: float, gained: float, min_rise: float) -> bool:
    """Whether a stretch that grew by `gained` before would, at that rate, have gained `expected`,
    clearly more than nothing: twice the smallest rise counted and a share of what it gained."""
    return gained > 0 and expected >= max(PLATEAU_MIN_RISES * min_rise, PLATEAU_SHARE * gained)


def keeps_new_highs(steps: list[int], values: list[float]) -> bool:
    """Whether `values` (a holder's bytes while its tensor count stays the same) grow beyond the
    range of sizes seen: a new high on most samples, the last one included, or a long significant
    trend. Sizes drawn at random (sequence lengths) rise on a few samples only by chance."""
    v = np.asarray(values, dtype=float)
    if len(v) < MIN_SAMPLES:
        return False
    highs = np.maximum.accumulate(v)
    new = v[1:] > highs[:-1]
    if new[-1] and new.mean() >= NEW_HIGH_SHARE:
        return True
    if len(v) < LONG_TREND_SAMPLES:
        return False
    tau, p = kendall(np.asarray(steps, dtype=float), v)
    return bool(tau > 0 and p < LONG_TREND_P)
