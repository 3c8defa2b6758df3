"""Growth across the TensorProbe's sampled deep steps: too few points for a significance
test, so growth is a rise that is mostly monotone and still climbing in the second half."""

from __future__ import annotations

import numpy as np

#: Fewest samples (deep steps) on which a growth can be judged.
MIN_SAMPLES = 3
#: Tensors a holder must gain over the run before its count counts as growth.
MIN_COUNT_RISE = 2


def sustained_rise(steps: list[int], values: list[float], min_rise: float, rel_rise: float = 0.0) -> dict | None:
    """Monotone, sustained growth of `values` over `steps`; None when it does not grow."""
    n = len(values)
    if n < MIN_SAMPLES:
        return None
    v = np.asarray(values, dtype=float)
    x = np.asarray(steps, dtype=float)
    rise = v[-1] - v[0]
    if rise < max(min_rise, rel_rise * max(abs(v[0]), 1.0)):
        return None
    d = np.diff(v)
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    if pos < max(2, 0.5 * (n - 1)) or neg > 0.25 * (n - 1):
        return None
    mid = n // 2
    if not (v[-1] > v[mid] and v[mid] >= v[0]):  # still growing in the second half: not a filling cache
        return None
    # Theil-Sen slope per step
    slopes = [(v[j] - v[i]) / (x[j] - x[i]) for i in range(n) for j in range(i + 1, n) if x[j] > x[i]]
    slope = float(np.median(slopes)) if slopes else 0.0
    mono = pos / (n - 1)
    conf = 0.5 + 0.45 * min(1.0, mono * min(1.0, (n - 1) / 5))
    return {
        "slope": slope,
        "rise": float(rise),
        "first": float(v[0]),
        "last": float(v[-1]),
        "n": n,
        "confidence": round(conf, 3),
        "span": int(x[-1] - x[0]),
    }
