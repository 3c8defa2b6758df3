"""A holder that grew on its sampled steps, then was not sampled for a long stretch over which
memory stayed flat, has not been shown to leak: it may have filled and stopped (a replay buffer,
a cache with a bound). Its growth stays in the report as evidence, not as a leak.

At level full the walks sample the whole run, so this rarely applies; at level auto the walks
run in windows, and what grew in the first window must be confirmed by the counters after it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..run import HOST_COLUMNS, Run
from ..schema import Finding
from ..units import fmt_bytes
from .growth import memory_series
from .sampled_trend import refills_level
from .trend import theil

#: Steps after the last sample, and share of the run, before the counters must confirm it.
MIN_UNSAMPLED_STEPS = 16
MIN_UNSAMPLED_SHARE = 0.25
#: Counter values needed after the last sample to judge their slope.
MIN_TAIL_POINTS = 8
#: The counters after the last sample must rise (their trend, or their median step) at this share
#: of the holder's rate.
CONFIRM_SHARE = 0.25


def confirm_after_sampling(run: Run, findings: list[Finding]) -> list[Finding]:
    """`findings`, each leak whose samples (``data["steps"]``) ended long before the run did
    made no leak when the memory counter did not rise after its last sample: the run's memory
    column, or the host series a holder of Python data was found growing with (``host_column``:
    Python's small objects show in RSS, hardly in the heap)."""
    cache: dict = {}

    def series_of(column):
        if column not in cache:
            cache[column] = memory_series(run, column)
        return cache[column]

    def confirmed(f: Finding, column: str | None) -> Finding:
        series = series_of(column) if column is not None else None
        return f if series is None or column is None else _confirmed(f, series[1], series[2], column)

    out = []
    for f in findings:
        host = f.data.get("host_column") if isinstance(f.data, dict) else None
        column = host if isinstance(host, str) and host in run.steps else run.memory_column()
        judged = confirmed(f, column)
        # Python's small objects live in pymalloc's arenas: where the heap backed the holder on its
        # sampled steps (a dict's tables), RSS may be what its later growth shows in
        others = [c for c in HOST_COLUMNS if c != column and c in run.steps] if host == column else []
        if f.leak and not judged.leak and any(confirmed(f, c).leak for c in others):
            judged = f
        out.append(judged)
    return out


def _confirmed(f: Finding, steps: np.ndarray, values: np.ndarray, column: str) -> Finding:
    sampled = f.data.get("steps") if isinstance(f.data, dict) else None
    if not (f.leak and f.bytes_per_step > 0 and isinstance(sampled, list) and len(sampled) >= 2):
        return f
    first, last, end = float(sampled[0]), float(sampled[-1]), float(steps[-1])
    unsampled = end - last
    if unsampled < max(MIN_UNSAMPLED_STEPS, MIN_UNSAMPLED_SHARE * (end - first)):
        return f
    tail = steps >= last
    if tail.sum() < MIN_TAIL_POINTS:
        return f
    # the trend, or the typical step's rise: memory given back at each epoch's end (a sawtooth)
    # still rises on most steps while the holder fills again
    x, y = steps[tail], values[tail]
    slope = max(theil(x, y)[0], float(np.median(np.diff(y) / np.diff(x))))
    # ... unless the holder keeps no autograd graph and memory falls back to the same low at
    # every cycle: detached tensors filled and emptied each epoch (a metric's list states, an
    # epoch's outputs) are bounded by the epoch; a leak under the cycle raises its lows by at
    # least CONFIRM_SHARE of the holder's rate (the lows of the tail's two halves lie about half
    # the tail apart)
    if _detached(f) and refills_level(y, CONFIRM_SHARE * f.bytes_per_step * float(x[-1] - x[0]) / 2):
        why = f"{column} fell back to the same low at the end of each cycle"
    elif slope >= CONFIRM_SHARE * f.bytes_per_step:
        return f
    else:
        why = f"{column} rose {fmt_bytes(max(slope, 0.0))} per step against its {fmt_bytes(f.bytes_per_step)}"
    note = (
        f"it was sampled on steps {int(first)}-{int(last)} only; over steps {int(last)}-{int(end)} {why}: "
        f"what it holds stopped growing (it filled, or is bounded), so this is not shown to leak"
    )
    return replace(f, leak=False, evidence=(*f.evidence, note))


def _detached(f: Finding) -> bool:
    """Whether the holder's samples show no autograd graph at all (a ``nodes`` column of zeros)."""
    nodes = f.data.get("nodes") if isinstance(f.data, dict) else None
    return isinstance(nodes, list) and len(nodes) > 0 and max(nodes) == 0
