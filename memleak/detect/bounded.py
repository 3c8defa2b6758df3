"""Bounded containers still filling up: a holder that grows only because a container with a bound
fills towards it (a ``deque(maxlen=...)``, a replay memory beside its ``capacity``, a list the
user's code trims to N, a Dataset's memo keyed by sample index: `probes/bounds.py`,
`probes/holder_stats.py`) stops at its bound, however its count rose so far."""

from __future__ import annotations

from collections.abc import Sequence

from ..records import HolderRow, HoldersRecord
from ..units import fmt_bytes
from .holder_growth import _mostly_views, _series
from .sampled_trend import MIN_SAMPLES
from .thresholds import TENSOR_HOST_OVERHEAD

#: A bounded container still filling up is no leak while its bound is near (once full it keeps at
#: most this many times what it holds now)...
MAX_FILL_AHEAD = 16
#: ...or, however far its bound, while it holds at most this share of the run's memory once full,
#: each tensor's own objects on the host counted (a ``deque(maxlen=1000)`` of recent outputs in a
#: 40-step run: a window, not a leak; a million 0-d tensors, about 400 MB of objects, is one).
FULL_SHARE = 0.01


def filling_bounded(holders: Sequence[HoldersRecord], memory: float | None = None) -> dict[str, str]:
    """Holders that grow only because bounded containers fill up: they cannot pass their bound,
    which is near or holds at most FULL_SHARE of `memory` (the run's, when known) once full, their
    tensors carry no autograd graph, and each item holds no more tensors nor bytes than at the first
    sample: the growth is items added. Holder -> why."""
    if len(holders) < MIN_SAMPLES:
        return {}
    steps, by = _series(holders)
    out = {}
    for name, rows in by.items():  # a bound the user's code keeps is known from the second walk on
        seen = [r for r in rows if r is not None]
        seen = seen[next((i for i, r in enumerate(seen) if r.capacity), 0) :]
        at = next(s for s, r in zip(reversed(steps), reversed(rows), strict=True) if r is not None)
        if len(seen) < 2 or any(not r.capacity or not r.length for r in seen):
            continue
        first, last = seen[0], seen[-1]
        # per item, with room for one (the newest may count under the variables that made it)
        item = max(1.0, last.count / last.length)
        item_bytes = _item_bytes(first, last, item)
        if item_bytes is None or last.count / last.length > (first.count + item) / first.length + 0.05:
            continue
        full = last.capacity * (item_bytes + TENSOR_HOST_OVERHEAD * last.count / last.length)
        near = last.capacity <= MAX_FILL_AHEAD * last.length or (memory and full <= FULL_SHARE * memory)
        if any(r.grad or r.nodes for r in seen) or not near:
            continue
        state = "full" if last.length >= last.capacity else "still filling up"
        data = item_bytes * last.capacity
        # small tensors cost the host far more than their data (thresholds.TENSOR_HOST_OVERHEAD)
        objects = f" ({fmt_bytes(full)} of host memory with each tensor's own objects)" if full > 1.5 * data else ""
        out[name] = (
            f"{name} is a bounded container (it keeps at most {last.capacity} items: a deque's maxlen, the "
            f"capacity beside it, or the bound in your code) "
            f"{state}: {last.length} items at step {at}, about "
            f"{fmt_bytes(last.held_bytes / last.length)} each{_bases(last, item_bytes)}, so at most about "
            f"{fmt_bytes(data)}{objects} once full; its tensors carry no autograd graph"
        )
    return out


def _item_bytes(first: HolderRow, last: HolderRow, item: float) -> float | None:
    """The most bytes an item of the container holds once it is full, or None where that has no
    bound: as many as at the first sample; or, for small views of larger tensors, their bases' (no
    larger than at the first sample): views that share a base (a pool of a batch's rows, each
    replaced in turn) keep more bases alive as fewer of them share one, up to one each."""
    now = last.held_bytes / last.length
    if now <= 1.25 * (first.held_bytes + now) / first.length + 1024:
        return now
    if _mostly_views(last) and first.largest and last.largest <= 1.25 * first.largest + 1024:
        bound = item * last.largest
        return bound if now <= bound else None
    return None


def _bases(last: HolderRow, item_bytes: float) -> str:
    """Where an item may hold more than it does now: the bases its views keep."""
    if item_bytes <= last.held_bytes / last.length:
        return ""
    return f" (views that keep their bases alive, up to {fmt_bytes(item_bytes)} each)"
