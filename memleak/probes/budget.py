"""A share of the run's time that slow reads may take: a read is due while what the reads
spent stays under `share` of the time since the budget started (the first read is always due).
A step whose read is not due writes null; the detectors take the series as sampled."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimeBudget:
    def __init__(self, share: float) -> None:
        self.share = share
        self.t0: float | None = None  # None until started
        self.spent = 0.0

    def start(self) -> None:
        if self.t0 is None:
            self.t0 = time.perf_counter()

    def due(self) -> bool:
        return self.t0 is not None and self.spent <= self.share * (time.perf_counter() - self.t0)

    def timed(self, read: Callable[[], T]) -> T:
        """`read()`, its time counted against the budget."""
        t = time.perf_counter()
        try:
            return read()
        finally:
            self.spent += time.perf_counter() - t
