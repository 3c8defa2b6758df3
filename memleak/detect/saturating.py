"""Caches whose keys come from a fixed set, still filling: a holder that gains new entries ever more
rarely, as a cache keyed by a sequence length drawn from 32 buckets does (a rotary table or an
attention mask per length, a plan per shape). Each step adds an entry only when its key is new, so
after t steps about K(1 - exp(-t/K)) of the K keys are in: the count rises fast, then bends
towards K. A holder that leaks gains at a steady rate; its count fits a line, not that curve.

Pure over the walks' counts (`HoldersRecord`); culprits.py spares such a holder as it spares a
bounded container filling towards its bound (detect/bounded.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..records import HoldersRecord
from ..units import fmt_bytes
from .holder_growth import _series

#: Samples (walks) and steps spanned the curve is judged on, at least.
MIN_SAMPLES = 6
MIN_SPAN = 20
#: The fitted number of keys may be at most this many times the entries held now: nearly full.
MAX_FULL_AHEAD = 1.5
#: The curve must explain the counts this much better than a line (its squared error at most
#: this share of the line's)...
MAX_ERROR_SHARE = 0.25
#: ...and the rate in the later half of the span be at most this share of the first half's.
MAX_LATE_RATE = 0.5


def saturating_holders(holders: Sequence[HoldersRecord]) -> dict[str, str]:
    """Holders whose count bends towards a near bound, whose tensors carry no autograd graph and
    whose entries do not grow: holder -> why."""
    if len(holders) < MIN_SAMPLES:
        return {}
    steps, by = _series(holders)
    out = {}
    for name, rows in by.items():
        seen = [(s, r) for s, r in zip(steps, rows, strict=True) if r is not None]
        if len(seen) < MIN_SAMPLES or seen[-1][0] - seen[0][0] < MIN_SPAN:
            continue
        if any(r.grad or r.nodes or r.capacity for _, r in seen):
            continue  # graphs kept are a leak whatever the count; a known bound is bounded.py's
        t = np.array([s for s, _ in seen], dtype=float)
        n = np.array([r.count for _, r in seen], dtype=float)
        first, last = seen[0][1], seen[-1][1]
        if n[-1] < 8 or last.bytes / last.count > 1.25 * first.bytes / max(first.count, 1) + 1024:
            continue  # too few entries to see a curve, or entries that grow themselves
        keys = saturation(t, n)
        if keys is None:
            continue
        each = last.bytes / last.count
        out[name] = (
            f"{name} gains new entries ever more rarely ({int(n[-1])} at step {int(t[-1])}), as a cache whose "
            f"keys come from a fixed set fills up: its count follows that curve towards about {keys} entries, "
            f"about {fmt_bytes(keys * each)} once full; its tensors carry no autograd graph"
        )
    return out


def saturation(t: np.ndarray, n: np.ndarray) -> int | None:
    """The number of keys K that the counts `n` at steps `t` bend towards, when the curve
    n = n0 + (K - n0)(1 - exp(-(t - t0) / tau)) fits them far better than a line, K is near the last
    count and the later half's rate has fallen well below the first half's; else None."""
    span = t[-1] - t[0]
    mid = t[0] + span / 2
    at_mid = float(np.interp(mid, t, n))  # the walks are dense early and sparse late at level auto
    early, late = (at_mid - n[0]) / (mid - t[0]), (n[-1] - at_mid) / (t[-1] - mid)
    if early <= 0 or late > MAX_LATE_RATE * early:
        return None
    line_error = float(np.sum((n - np.polyval(np.polyfit(t, n, 1), t)) ** 2))
    best = None
    for keys in np.linspace(n[-1], MAX_FULL_AHEAD * n[-1], 11):
        for tau in np.geomspace(span / 20, span * 2, 24):
            fit = n[0] + (keys - n[0]) * (1 - np.exp(-(t - t[0]) / tau))
            error = float(np.sum((n - fit) ** 2))
            if best is None or error < best[0]:
                best = (error, keys)
    if best is None or best[0] > MAX_ERROR_SHARE * line_error:
        return None
    return int(round(best[1]))
