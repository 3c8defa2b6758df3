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


class BudgetedReads:
    """A probe's reads on a `TimeBudget`. A step whose read is not due gives the columns of the
    last read as null: the run file carries a value left out forward, as unchanged, and a stale
    reading would pair with newer counters (an NVML reading with a newer reserve makes up a gap)."""

    def __init__(self, share: float) -> None:
        self.budget = TimeBudget(share)
        self.columns: tuple[str, ...] = ()
        self.budget.start()

    def sample(self, read: Callable[[], dict]) -> dict:
        if not self.budget.due():
            return dict.fromkeys(self.columns)
        values = self.budget.timed(read)
        self.columns = tuple(values)
        return values


#: A young run is sampled densely: in its first YOUNG_DENSE steps, a probe's detail steps come
#: every YOUNG_GAP steps whatever its budget, so that a short run (a test, a script, a job that
#: fails early) has the few samples a trend needs (``detect/sampled_trend.py`` judges on three or
#: more; a budget of a few percent on a fast step would give a 15-step run two or three). It is a
#: start-up cost, paid once: at most YOUNG_DENSE / YOUNG_GAP detail steps, ...
YOUNG_DENSE = 16
YOUNG_GAP = 2
#: ... each of which costs at most this many seconds (a slower one keeps its budget's pace).
YOUNG_MAX_COST = 0.5


def young_gap(step: int, cost: float, doubling: bool = False) -> int | None:
    """The gap to the next detail step after one at `step` that cost `cost` seconds while the run is
    young; None once it is not (the probe's budget sets the pace). `doubling`: level auto's young
    run, where a probe has nothing to follow up: the next one twice as far on (steps 1, 3, 7)."""
    if step + YOUNG_GAP < YOUNG_DENSE and cost <= YOUNG_MAX_COST:
        return step + 1 if doubling else YOUNG_GAP
    return None


#: Reads of a memory counter around each module call (the modules probe's measured step) may cost
#: this many plain steps at most, or READS_MAX_SECONDS before a plain step was timed, and always
#: READS_FREE_SECONDS: on CPU each read walks the C heap's free chunks, which a heap holding many
#: graphs has by the hundred thousand (800 blocks, 12,800 reads a step at about 33 ms each: a
#: measured step took 10 minutes).
READS_SHARE = 4.0
READS_MAX_SECONDS = 0.5
READS_FREE_SECONDS = 0.05


def reads_affordable(read: Callable[[], object], reads: int, plain: float | None) -> tuple[bool, float]:
    """(whether `reads` calls of `read` fit the budget above, what they would cost), from the time
    of one call now."""
    t = time.perf_counter()
    read()
    cost = (time.perf_counter() - t) * reads
    return cost <= max(READS_FREE_SECONDS, READS_SHARE * plain if plain else READS_MAX_SECONDS), cost
