"""Growth that is the optimizer's state made lazily: no leak, bounded by its parameters.

Adam (and every optimizer that keeps state per parameter) makes a parameter's state at its first
update, and a parameter whose gradient is None is not updated. Where parameters get their first
update late (a task's head trained when its task is first drawn, an expert first routed to, a layer
unfrozen later) the state grows step after step, as a leak does, until every parameter has it. The
modules probe's categories say it (probes/categories.py): the state grows together with the bytes
of the parameters that have state (`stateful_params`), at the same bytes of state per byte of
parameter, while the optimizer's parameters (`optimizer_params`) stay the same. Growth of which
that explains most is bounded. State that grows per parameter (a history kept in `state[p]`) or
parameters added to the optimizer (a param group a step) are not this.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..run import Run
from ..schema import Shape
from ..units import fmt_bytes
from .lifetimes import explained

#: The state's rise must be at least this share of the memory's over the same steps...
EXPLAINED_SHARE = 0.8
#: ...at the same bytes of state per byte of parameter with state, within this share.
RATIO_DRIFT = 0.1
#: A growth the optimizer's lazy state explains is no leak: its confidence at most this.
LAZY_CONFIDENCE = 0.25


def created_lazily(run: Run, g: Any, x: np.ndarray, y: np.ndarray) -> Any:
    """`g` (a `growth.Growth` of the series `y` at steps `x`), no leak where the optimizer's state,
    made lazily for parameters at their first update, explains most of its rise."""
    if not g.leak or len(x) < 2:
        return g
    recs = [r for r in getattr(run, "module_records", []) if r.categories.get("optimizer_params")]
    before = [r for r in recs if r.step <= x[0]]
    points = before[-1:] + [r for r in recs if x[0] < r.step <= x[-1]]
    if len(points) < 2:
        return g
    a, b = points[0].categories, points[-1].categories
    state = b.get("optimizer_state", 0) - a.get("optimizer_state", 0)
    rise = float(np.interp(points[-1].step, x, y) - np.interp(points[0].step, x, y))
    if not (rise > 0 and state >= EXPLAINED_SHARE * rise) or b["optimizer_params"] != a["optimizer_params"]:
        return g
    if not b.get("stateful_params", 0) > a.get("stateful_params", 0) or not _same_ratio(a, b):
        return g
    per_byte = b.get("optimizer_state", 0) / b["stateful_params"]
    more = per_byte * (b["optimizer_params"] - b["stateful_params"])
    why = (
        f"the optimizer's state grew by {fmt_bytes(state)} of the {fmt_bytes(rise)} memory rose between steps "
        f"{points[0].step} and {points[-1].step}, made for parameters at their first update (a task's head, an "
        "expert or a layer trained late), at the same bytes per parameter: it is bounded, at most "
        f"{fmt_bytes(more)} more once every parameter it steps has state, not a leak"
    )
    return explained(g, Shape.BOUNDED, why, LAZY_CONFIDENCE)


def _same_ratio(a: dict[str, int], b: dict[str, int]) -> bool:
    """The same bytes of state per byte of parameter with state at both records (none yet at the
    first is the same: its first update makes it)."""
    if not a.get("stateful_params"):
        return True
    ra = a.get("optimizer_state", 0) / a["stateful_params"]
    rb = b.get("optimizer_state", 0) / b["stateful_params"]
    return abs(rb - ra) <= RATIO_DRIFT * ra
