"""Growth a garbage collection gives back: cyclic garbage waiting for Python's collector.

Objects in reference cycles (a callback that refers back to its owner, an exception's traceback)
are freed only by the cyclic collector, which runs when enough new objects pile up: memory rises
until it does. Under memleak, whose own objects count towards that, it runs at other moments than
without, and a garbage cycle it finds still reachable waits for an older generation's collection.
When a run ends with memory rising, the recorder runs one full collection and says in the run what
it gave back (`GC_AT_END`, recorder/live.py); growth that it gave back most of is no leak.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..run import Run
from ..schema import GC_AT_END, Shape
from ..units import fmt_bytes
from .lifetimes import explained, gc_returned

#: A growth a garbage collection gave back is no leak: its confidence at most this.
GC_CONFIDENCE = 0.25


def collected(run: Run, g: Any, y: np.ndarray) -> Any:
    """`g` (a `growth.Growth`), no leak where the garbage collection when the run ended (recorder/live.py) gave back
    most of what the analysed series `y` rose: cyclic garbage waiting for Python's collector, which
    runs when enough new objects pile up (at other times under memleak, whose objects count too)."""
    if not g.leak:
        return g
    freed = next((e.get("freed", {}).get(g.column) for e in run.events if e.get("event") == GC_AT_END), None)
    rise = float(y[-1] - np.median(y[:3]))  # as observed: a fitted slope overstates a sawtooth's
    if not isinstance(freed, (int, float)) or not gc_returned(rise, 1.0, float(freed), 0.0):
        return g
    why = (
        f"a full garbage collection when the run ended gave back {fmt_bytes(freed)} of {g.column}, "
        f"{freed / rise:.0%} of what it rose: it was cyclic garbage (objects in reference cycles) "
        "waiting for Python's collector, not a leak"
    )
    return explained(g, Shape.SAWTOOTH, why, GC_CONFIDENCE)
