"""The live leak check: the few columns kept in memory for it, when it runs (sparse steps,
within a time budget), its cheap screen, and the growth detector's verdict, confirmed twice and
against a garbage collection before the one warning."""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..schema import GC_AT_END, OWN_COLUMN

if TYPE_CHECKING:
    import pandas as pd

    from ..detect.growth import Growth
    from ..detect.lifetimes import LiveState
    from ..io import RecordSink

log = logging.getLogger("memleak")

# Steps at which the live leak check runs: sparse enough that its cost stays negligible.
_FIRST_LIVE_CHECK = 16
_LIVE_CHECK_GROWTH = 1.5
# ...and only while all checks so far cost at most this share of the run's time.
_LIVE_CHECK_BUDGET = 0.005
# Checks beyond that budget, per run, to confirm growth a check saw (each costs ~10-30 ms).
_LIVE_EXTRA_CHECKS = 3
# The columns kept in memory for that check (the full records go to the sink).
NAN = float("nan")
# Rows kept of them: past this, every other row is dropped and from then on only every other
# kept step is added, so memory stays bounded however long the run (72 bytes a row; the growth
# detector bins a long series to 1000 points anyway).
LIVE_ROWS = 4096
LIVE_COLUMNS = (
    "step",
    "time",
    "duration",
    "allocated_bytes",
    "heap_bytes",
    "tensor_bytes",
    "rss_bytes",
    "device_total_bytes",
    OWN_COLUMN,
)

_EMPTY_COLUMN = sys.getsizeof(array("d"))  # a column's size with no room for a value

#: Reads a memory column again now (less memleak's own bytes), or None where it cannot be.
ReadNow = Callable[[str], "float | None"]


def _trends_up(y, min_rel: float, min_tau: float = 0.3, points: int = 200) -> bool:
    """A cheap screen before the growth detector: the last quarter of the series sits above its
    first quarter (medians) by at least half the share `min_rel` of its level that the detector
    needs (detect/thresholds.py: a warm-up jump followed by a flat line does not), and Kendall's
    tau against time (on at most `points` evenly spaced values) is clearly positive. The
    detector needs far more to confirm a leak, so this only skips hopeless cases."""
    import numpy as np

    y = y[~np.isnan(y)]
    if len(y) < 8:
        return False
    quarter = len(y) // 4
    rise = median(y[-quarter:]) - median(y[:quarter])
    if rise < 0.5 * min_rel * abs(median(y)):
        return False
    if len(y) > points:
        y = y[np.linspace(0, len(y) - 1, points).astype(int)]
    return kendall_tau(y) >= min_tau


def later_half_rises(y, min_rel: float) -> bool:
    """The live check's screen: `_trends_up` on the later half of the series. A warm-up ramp
    (first allocations, optimizer state, caches filling) then a flat line is the usual clean
    run, and it must not import the detector; a leak rises in the later half too."""
    return _trends_up(y[len(y) // 2 :], min_rel)


def median(y) -> float:
    """The median of `y` (a numpy array, not empty, no NaN): np.median's own NaN check imports
    numpy.ma the first time, 9 ms, more than a hundred steps' screens."""
    import numpy as np

    s = np.sort(y)
    n = len(s)
    return float(s[(n - 1) // 2] + s[n // 2]) / 2


def kendall_tau(y) -> float:
    """Kendall's tau of `y` (at least two values) against its order, in numpy: a few
    microseconds for the short series the screens look at, where scipy's would cost more."""
    import numpy as np

    upper = np.triu_indices(len(y), 1)
    return float(np.sign(y[None, :] - y[:, None])[upper].mean())


class LiveCheck:
    """One run's live leak check. The tracker appends each step's values to `series` and,
    from step `next_at` on, asks `due` and calls `run`; `confirmed` is set once a leak is."""

    def __init__(self, warned_elsewhere: Callable[[], bool] = lambda: False) -> None:
        # whether another tracker running alongside already warned of a leak (nested trackers, running.py)
        self.warned_elsewhere = warned_elsewhere
        self.series = {col: array("d") for col in LIVE_COLUMNS}  # 8 bytes a value, NaN when absent
        self.stride = 1  # one row kept every `stride` steps (doubles each time the rows are halved)
        # the columns' allocated bytes (they grow together: one value each a row); `append` says
        # in `grew` whether they changed, the only heap a plain step's bookkeeping keeps
        self._allocated = sys.getsizeof(self.series["step"])
        self.grew = False
        self.next_at: float = _FIRST_LIVE_CHECK
        self.seconds = 0.0  # spent in checks so far
        self.extra = 0  # checks run beyond the time budget
        # growth an earlier live check saw, not yet confirmed (detect/lifetimes.py)
        self.pending: LiveState | None = None
        self.confirmed = False
        self.leaking: str | None = None  # the column the latest check took for a leak (pending or not)
        # heap bytes the checks changed since the tracker last took them (what they keep, less the
        # garbage their collections freed: a drop memleak caused); the tracker counts them as its
        # own, off the host series (`run`)
        self.own_delta = 0.0
        self.given_back = 0.0  # heap bytes a collection freed that were a growth of the user's

    def append(self, step: int, values: dict[str, Any]) -> None:
        """Keep the live columns of step `step` (every `stride`-th step), halving the rows at LIVE_ROWS."""
        if step % self.stride:
            self.grew = False
            return
        for col, vals in self.series.items():
            v = values.get(col)
            vals.append(NAN if v is None else v)
        if len(self.series["step"]) >= LIVE_ROWS:
            self.series = {col: vals[::2] for col, vals in self.series.items()}  # steps 0, 2s, 4s, ...
            self.stride *= 2
            if self.pending is not None:  # the rows it counted, after the halving
                self.pending = dataclasses.replace(self.pending, rows=(self.pending.rows + 1) // 2)
        allocated = sys.getsizeof(self.series["step"])
        self.grew, self._allocated = allocated != self._allocated, allocated

    def grows_next(self, step: int) -> bool:
        """Whether `append` of step `step` will allocate the columns anew (a row past what they
        hold room for, or the halving): the tracker reads the heap on both sides of it."""
        if step % self.stride:
            return False
        rows = len(self.series["step"])
        room = (self._allocated - _EMPTY_COLUMN) // self.series["step"].itemsize
        return rows >= room or rows + 1 >= LIVE_ROWS

    def due(self, step: int, elapsed: float) -> bool:
        """Within the time budget; or beyond it, a few times a run, to confirm or clear growth an
        earlier check saw (the live check needs two looks at a growth before it calls it a leak)."""
        if self.seconds <= _LIVE_CHECK_BUDGET * elapsed:
            return True
        if self.pending is None:
            return False  # nothing to confirm (and the detector may not be imported yet)
        from ..detect.lifetimes import ripe

        if ripe(self.pending, step) and self.extra < _LIVE_EXTRA_CHECKS:
            self.extra += 1
            return True
        return False

    def run(
        self,
        step: int,
        meta: dict[str, Any],
        sink: RecordSink,
        read_now: ReadNow,
        on_confirmed: Callable[[Growth], None],
    ) -> None:
        """One check, its time counted against the budget (`on_confirmed` included), and the
        next one scheduled."""
        self.next_at = int(step * _LIVE_CHECK_GROWTH)
        t0 = time.perf_counter()
        before = read_now("heap_bytes")
        growth = self._check(step, meta, sink, read_now)
        after = read_now("heap_bytes")
        if before is not None and after is not None:
            # what the check kept (the detector's import, numpy's first-use set-up) is memleak's own,
            # and so is the garbage its collections freed, but for growth one gave back (the user's)
            self.own_delta += after - before + self.given_back
        self.given_back = 0.0
        if growth is not None:
            on_confirmed(growth)
        self.seconds += time.perf_counter() - t0

    def _check(self, step: int, meta: dict[str, Any], sink: RecordSink, read_now: ReadNow) -> Growth | None:
        """Warn once, as soon as the growth detector confirms a leak; that growth, else None."""
        if self.confirmed:
            return None
        series, rising = self._screen()
        if not rising:
            return None  # the usual case, a clean run: no need for the full (~10 ms) analysis
        t0 = time.perf_counter()
        from ..detect import growth as _  # noqa: F401  (pandas and scipy: ~20 MiB of C heap, not before a rise)

        self.seconds -= time.perf_counter() - t0  # once a process, like a start: not the checks' budget
        import pandas as pd

        from ..detect.growth import analyze_growth
        from ..run import Run

        steps = pd.DataFrame(series)
        try:
            growth = analyze_growth(Run(meta, steps.dropna(axis=1, how="all")))
        except Exception as e:  # a detector bug must not break the user's training loop
            self.next_at = float("inf")
            log.warning("memleak: the live leak check failed and was turned off: %r", e)
            sink.event("probe_failed", probe="live_check", step=step, error=repr(e))
            return None
        if not self._confirmed(growth, steps, step, sink, read_now):
            return None
        self.confirmed = True
        _announce(growth, step, _growth_start(steps, growth, step), sink, loud=not self.warned_elsewhere())
        return growth

    def _screen(self) -> tuple[dict[str, Any], list[str]]:
        """The live columns as arrays, and the memory columns (less memleak's own bytes) whose later
        half rises: the cheap screen before the growth detector."""
        import numpy as np

        from ..detect.thresholds import min_rel_growth
        from ..schema import HOST_COLUMNS, MEMORY_COLUMNS

        series = {col: np.frombuffer(vals, dtype=np.float64).copy() for col, vals in self.series.items()}
        own = np.nan_to_num(series[OWN_COLUMN])  # off the host series, as the detector takes it
        screened = {col: series[col] - own if col in HOST_COLUMNS else series[col] for col in MEMORY_COLUMNS}
        return series, [col for col, y in screened.items() if later_half_rises(y, min_rel_growth(col))]

    def collect_at_end(self, step: int, sink: RecordSink, read_now: ReadNow) -> None:
        """When the run ends with memory still rising: one full garbage collection, what it gave back
        in the run (`GC_AT_END`). Cyclic garbage waits for Python's collector, which runs when enough
        new objects pile up (sooner or later under memleak, whose own objects count too): memory
        that only rose because none ran yet is not a leak (detect/garbage.py). None runs while the
        program keeps the collector off (`_collect`)."""
        import gc

        if not gc.isenabled() or len(self.series["step"]) < 2:
            return
        try:
            rising = self._screen()[1]
            before = {col: read_now(col) for col in rising}
            if rising:
                _collect(read_now)
            freed = {col: b - a for col, b in before.items() if b is not None and (a := read_now(col)) is not None}
            if freed:
                sink.event(GC_AT_END, step=step, freed=freed)
        except Exception as e:  # never hurt the run it watched
            log.warning("memleak: the garbage collection at the run's end failed: %r", e)

    def _confirmed(self, growth: Growth, steps: pd.DataFrame, step: int, sink: RecordSink, read_now: ReadNow) -> bool:
        """A leak the live check may report: growth that lasted and kept its slope since an earlier
        check (else a filling cache is still possible), and that a garbage collection does not
        give back (cyclic garbage waiting for the collector)."""
        from ..detect.lifetimes import live_series, live_verdict

        x, y = live_series(steps, growth.column) if growth.column else (None, None)
        if y is None:
            return False
        assert x is not None  # live_series gives both or neither
        was_pending = self.pending is not None
        pending_rows = self.pending.rows if self.pending is not None else 1
        verdict, self.pending = live_verdict(growth, y, x, self.pending)
        self.leaking = growth.column if verdict == "leak" or self.pending is not None else None
        if verdict != "leak":
            if self.pending is not None and not was_pending:
                # garbage older than this growth must not count as given back later
                _collect(read_now)
            return False
        return not self._gc_gives_back(growth, x[-1] - x[pending_rows - 1], step, sink, read_now)

    def _gc_gives_back(self, growth: Growth, span: float, step: int, sink: RecordSink, read_now: ReadNow) -> bool:
        """Whether a garbage collection now gives back the growth seen over `span` steps: then it
        was cyclic garbage, not a leak (said in the run and the log, and the pending growth cleared)."""
        from ..detect.lifetimes import gc_returned

        assert growth.column is not None  # a confirmed growth names its column
        before = read_now(growth.column)
        if before is None:
            return False
        freed = _collect(read_now)
        after = read_now(growth.column)
        if after is None or not gc_returned(growth.slope, span, before, after):
            return False  # garbage unrelated to the growth
        self.pending = None
        self.given_back = freed
        sink.event("gc_returned", step=step, column=growth.column, freed_bytes=before - after)
        log.info(
            "memleak: %s grew, but a garbage collection gave back %d bytes: not a leak", growth.column, before - after
        )
        return True


def _growth_start(steps: pd.DataFrame, growth: Growth, step: int) -> int:
    """The step the growth began at: the first step after the detector's warm-up."""
    from ..run import step_axis

    if not 0 <= growth.warmup_steps < len(steps):
        return step
    return int(step_axis(steps)[growth.warmup_steps])


def _collect(read_now: ReadNow) -> float:
    """Run a full garbage collection; the heap bytes it freed (0 where the heap is not read).
    None runs while the program keeps the collector off (``gc.disable()``): memleak must not free,
    behind its back, the cyclic garbage that program keeps (the leak it would then not see), which
    nothing will ever free, so a growth stays a leak."""
    import gc

    if not gc.isenabled():
        return 0.0
    before = read_now("heap_bytes")
    gc.collect()
    after = read_now("heap_bytes")
    return 0.0 if before is None or after is None else before - after


def _announce(growth: Growth, step: int, since: int, sink: RecordSink, loud: bool = True) -> None:
    """The one warning of a growth the live check takes for a leak, in the log and in the run (the
    `leak_confirmed` event). Provisional: the report at the end judges the whole run and says
    whether it lasted. At INFO level, not warned again, when another running tracker already
    warned of it (`loud` False)."""
    from ..units import fmt_bytes

    when = (
        f"; at this rate it runs out of memory in about {growth.steps_to_full:,.0f} more steps"
        if growth.steps_to_full
        else ""
    )
    log.log(
        logging.WARNING if loud else logging.INFO,
        "memleak: possible leak at step %d: %s has grown %s per step over the %d steps since step %d%s; "
        "the report at the end says whether the growth lasted%s",
        step,
        growth.column,
        fmt_bytes(growth.slope),
        step - since,
        since,
        when,
        "" if loud else " (another running memleak tracker already warned)",
    )
    sink.event(
        "leak_confirmed",
        step=step,
        column=growth.column,
        slope=growth.slope,
        steps_to_full=growth.steps_to_full,
        since_step=since,
    )
