"""The auto level: full detail while the run is young, then the counters every step and full
detail in windows.

Young runs (`YOUNG_STEPS`): the first steps run as level full does (each sampled probe on its
own time budget; the census alone waits for the first window, and the module hooks sample
steps 1, 3, 7, 15 and 31 only), so a short run (a test, a
script, a job that fails early) gets the same evidence, and the same verdict, as at full. It is
a start-up cost, so a young run that shows nothing ends early (`QUIET_AT`): once the tensor
probe's deep steps (three at least: while nothing was seen, each comes twice as far on as the
last, at steps 1, 3 and 7) found no tensor surviving its step, no graph outliving its
backward and no holder holding more tensors, tensor bytes or graph nodes from one walk to the
next, nor plain Python data faster than a detector would name it (`Probe.quiet`), and the growth
screen sees nothing rising since step 0. Most runs leak nothing, and they pay for 8 young steps,
not 32; a run where anything survives or grows keeps all 32, the same evidence as at full.
While nothing was seen, only the first deep step tags creation sites (`tensors.YOUNG_TAGGED`):
the later ones walk, and tag again once anything survives or grows.

After that, a window turns the sampled probes on (module hooks, creation-site tagging,
saved-tensor tracking, the reference walk; `Probe.set_detail`), each at its densest, a detail
step every other step, for `WINDOW_STEPS` steps: five samples over ten steps, what the culprit
detectors need to name a holder (three samples of a rising count, `detect/sampled_trend.py`;
survivors from three sampled steps, `detect/survivors.py`). Between windows those probes are
off but keep what they learned, so a tensor tagged in one window and still alive in the next
is seen surviving; when the run ends, the tensor probe walks once more (`Probe.finish`), so
what survived early is looked at again at the end (and, while the loop's frame is alive, each
holder's count is sampled once more: a holder kept every few steps gets its latest count).

Checks (`check`): once the young steps ended, the reference walk alone at the end of a step
(`Probe.check`: no tagging in the step, a fifth of a deep step's cost) at steps `CHECK_RATIO`
apart (the first sooner), outside the windows' budget (a log(n) cost): a holder gaining a tensor
every 10 or 20 steps, too little for the growth screen, is counted at a few steps over the run. After a quiet
start, the first check that sees anything survive or grow (`Probe.quiet`) opens a growth window
at once: a leak that began after the young steps is sampled while it runs.

Windows open

- when the growth screen sees memory start to rise (`growth`): Kendall's tau of the last
  `SCREEN_ROWS` values of the device, heap and census series since the last window ended is
  clearly positive, or the series rises as a staircase (`stairs`: what is kept every few
  steps); rows of a window are left out (what the probes keep while they sample is memleak's
  own memory, and must not open the next window). These
  windows are not budgeted, since a leak is what memleak is for, but each waits until the run
  is `GROWTH_SPACING` times as long as when the last one opened, so a run that keeps growing
  gets a few windows, spread over its length, not full detail throughout;
- on a time budget (`sample`): a window opens when the windows' detail so far, with one more
  window, costs at most `SAMPLE_BUDGET` (0.25 %) of the run's time (before any window was measured, one
  is taken to cost `UNMEASURED_DETAIL` plain steps a step), and `SAMPLE_GAP` steps have passed
  since the last window: slow growth the screen misses is still sampled, and a bounded cache is
  seen again after it filled.

What detail costs is measured: the time of a detail step, memleak's sampling included, less the
time of a plain (counters) step, and never less than `DETAIL_FLOOR` of a plain step.
"""

from __future__ import annotations

import bisect
import math
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..detect.thresholds import MIN_DATA_BPS, min_rel_growth
from ..schema import OWN_COLUMN, DetailReason
from .live import kendall_tau, median

if TYPE_CHECKING:
    import numpy as np

    from ..probes import Probe

#: Steps a window lasts...
WINDOW_STEPS = 10
#: The first steps run as level full does (a start-up cost every run pays)...
YOUNG_STEPS = 32
#: ...but from this step on, they end as soon as the probes saw nothing surviving or growing
#: (`Probe.quiet`) and the growth screen sees nothing rising.
QUIET_AT = 8
#: A boundary that changes from a model call to a stronger one (`restart`) at this step or later
#: begins the young steps again: the steps before were parts of the first iteration, and they took
#: half the young steps or more (a change sooner leaves enough of them).
RESTART_MIN = 16
#: Each detail step is taken to cost at least this share of a plain step, whatever was measured
#: (on a loaded machine the measure is mostly noise, and noise must not make windows free).
DETAIL_FLOOR = 0.3
#: Sampled windows: all detail may cost this share of the run's time (the counters cost 1.4 to
#: 1.8 % on CPU: what auto adds, windows, checks and the screen, must fit in the rest of 2 %)...
SAMPLE_BUDGET = 0.0025
#: ...and one comes at most every SAMPLE_GAP steps (a cost measured near zero is noise, not free).
SAMPLE_GAP = 100
#: Until a window has been measured, each of its steps is taken to cost this many plain steps more
#: (a dense window's detail steps measure about a third of one on a CPU transformer; taking a whole
#: one keeps the first window inside the budget wherever detail costs more).
UNMEASURED_DETAIL = 1.0
#: A growth window waits until the run is this many times as long as when the last one opened.
GROWTH_SPACING = 2.0
#: Checks: one reference walk each (each holder's count) once the young steps ended,
#: at steps each CHECK_RATIO times the last (from FIRST_CHECK_RATIO times the young steps' end), so
#: that a holder that gains a tensor every few steps, too little for the growth screen, is counted
#: at a few steps spread over the run (a log(n) cost, like the young steps', not a share of the run).
CHECK_RATIO = 2.0
#: ...the first one sooner: a short run (30 steps) gets two, and a leak that starts halfway is
#: walked while it runs, not only at the end (one sample of it is no trend).
FIRST_CHECK_RATIO = 1.5
#: The growth screen: Kendall's tau over the last SCREEN_ROWS values (at least SCREEN_MIN_ROWS)...
SCREEN_ROWS = 64
SCREEN_MIN_ROWS = 8
#: ...at least this many of its standard deviations under no trend, and at least SCREEN_MIN_TAU;
#: the series rose from one step to the next on at least this share of the steps (a leak adds
#: to memory every step, while a process's heap also creeps up in a few rare steps), and by
#: SCREEN_NOISE times the median size of a step's change at least (not jitter that drifts).
SCREEN_SIGMAS = 2.5
SCREEN_MIN_TAU = 0.3
SCREEN_MIN_RISING = 0.5
SCREEN_NOISE = 4.0
#: ...and by at least this share of the rise the growth detector needs (`detect/thresholds.py`,
#: a share of the series' level): a heap that creeps by tens of bytes a step while a process
#: warms up (allocator caches, interned objects) rises on most steps, but opens no window.
SCREEN_MIN_SHARE = 0.5
#: A staircase rises on few steps (something kept every few steps) and passes too: it falls back
#: by at most SCREEN_STAIR_FALL of its rise in all, and each of SCREEN_STAIR_PARTS stretches of
#: its rows sets a new high (the rises are spread over the rows, not one jump or a warm-up's).
SCREEN_STAIR_FALL = 0.1
SCREEN_STAIR_PARTS = 3
#: The screen runs every few steps, within this share of the step time.
SCREEN_EVERY = 4
SCREEN_BUDGET = 0.002
#: The series the screen watches (host RSS creeps while a process warms up: it is no sign).
SCREEN_COLUMNS = ("allocated_bytes", "heap_bytes", "tensor_bytes")


def rising(values: Sequence[float], min_rel: float = 0.0) -> bool:
    """Whether `values` (NaN where not read) trend up: by at least SCREEN_MIN_SHARE of the share
    `min_rel` of its level the growth detector needs (its largest single step aside), and it rose
    on most steps with Kendall's tau clearly above what noise gives, or it rose as a staircase
    (`stairs`)."""
    import numpy as np

    y = np.asarray(values, dtype=np.float64)
    y = y[np.isfinite(y)]
    n = len(y)
    if n < SCREEN_MIN_ROWS:
        return False
    d = np.diff(y)
    rise = float(y[-1] - y[0])
    if rise <= SCREEN_NOISE * median(np.abs(d)):
        return False
    # less its largest single step: one jump that stays (a warm-up allocating the optimizer's
    # state, a new thread's arena) with a creep after it is a step change, not growth
    if rise - max(float(d.max()), 0.0) < SCREEN_MIN_SHARE * min_rel * abs(median(y)):
        return False  # a creep far below any growth the detector reports (a process warming up)
    if (d > 0).mean() < SCREEN_MIN_RISING:
        return stairs(y, d, rise)
    tau = kendall_tau(y)
    sigma = math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1)))  # tau's spread when there is no trend
    return tau >= max(SCREEN_MIN_TAU, SCREEN_SIGMAS * sigma)


def stairs(y: np.ndarray, d: np.ndarray, rise: float) -> bool:
    """Whether `y` (steps `d` apart) rises as a staircase: it hardly ever falls back and sets a new
    high in each of SCREEN_STAIR_PARTS stretches of its rows (the loss with its graph appended at
    each log interval: a rise every few steps, flat between)."""
    import numpy as np

    if float(-d[d < 0].sum()) > SCREEN_STAIR_FALL * rise:
        return False
    high = float(y[0])
    for part in np.array_split(y[1:], SCREEN_STAIR_PARTS):
        if not len(part) or float(part.max()) <= high:
            return False
        high = float(part.max())
    return True


def may_rise(y: Sequence[float], min_rel: float = 0.0) -> bool:
    """What `rising` needs at least, in plain Python: a few microseconds, where numpy's full test
    costs hundreds in the cold caches a training step leaves (a clean run's series fails it, so
    the screen fits in its budget every SCREEN_EVERY steps). Its finite values rise from the
    first to the last, by at least SCREEN_MIN_SHARE of the share `min_rel` of their least value
    (which `rising` asks of their median)."""
    vals = [v for v in y if math.isfinite(v)]
    if len(vals) < SCREEN_MIN_ROWS:
        return False
    rise = vals[-1] - vals[0]
    low = min(vals)
    return rise > 0 and (low < 0 or rise >= SCREEN_MIN_SHARE * min_rel * low)


def screen(series: Mapping[str, array], since: int = 0) -> bool:
    """Whether any watched memory series rises over its last SCREEN_ROWS values from step
    `since` on (the host heap less memleak's own bytes)."""
    steps = series["step"]
    first = max(bisect.bisect_left(steps, since), len(steps) - SCREEN_ROWS)
    if len(steps) - first < SCREEN_MIN_ROWS:
        return False
    own = series.get(OWN_COLUMN)
    for col in SCREEN_COLUMNS:
        vals = series.get(col)
        if vals is None or len(vals) != len(steps):
            continue
        y: Sequence[float] = vals[first:]
        if col == "heap_bytes" and own is not None and len(own) == len(steps):
            y = [v - (o if math.isfinite(o) else 0.0) for v, o in zip(y, own[first:], strict=True)]
        min_rel = min_rel_growth(col)
        if may_rise(y, min_rel) and rising(y, min_rel):
            return True
    return False


def quiet(probes: Sequence[Probe], series: Mapping[str, array]) -> bool:
    """Whether a young run has shown nothing that asks for more of its young steps: every probe is
    quiet (`Probe.quiet`; with no probes, nothing was asked) and no series rises since step 0."""
    return bool(probes) and all(p.quiet(MIN_DATA_BPS) for p in probes) and not screen(series)


class AutoLevel:
    """When one run at level auto records full detail. The tracker calls `begin` before step 0
    and `after` at the end of each step; each returns (on, why) when detail changes from the
    next step on, else None; `check_due` says when `check` is to run at the end of that step."""

    def __init__(self) -> None:
        self.on = False
        self.until = 0  # the window covers the steps before this one (and the last one ended there)
        self.windows = 0
        self.check_due = False  # `after` asks for a check at the end of its step
        self.quiet_start = False  # the young steps ended quiet, and no check has seen anything since
        self.checks = 0  # checks run (they are not windows, nor paid by the windows' budget)
        self.growth_at = 0  # the step the last growth window opened at (0: none yet)
        self.detail_seconds = 0.0  # time of the detail steps (step 0 aside: first-use set-up)
        self.detail_steps = 0
        self.plain: float | None = None  # a counters step's time (moving average)
        self.next_screen = SCREEN_MIN_ROWS
        self.screen_seconds = 0.0
        self.young = False  # the first steps, run as at level full (their cost is not the windows')
        self.next_check = math.inf  # the step the next check runs at (set when the young steps end)
        self.screen_from = 0  # the growth screen's rows start here (the last window's end)
        self.young_from = 0  # the young steps began here (`restart`)
        self.restart_at: int | None = None  # the young steps begin again from this step

    def begin(self) -> tuple[bool | None, DetailReason]:
        """The young run's detail: None, each probe on level full's own schedule."""
        self.on = True
        self.young = True
        self.until = YOUNG_STEPS
        return None, DetailReason.START

    def restart(self, step: int) -> None:
        """The iterations were ended at each call of the model until `step`, which a stronger boundary
        ended (tracker.step() in a decode loop that calls the model once a token): those steps were
        parts of one iteration, so the young steps begin again after `step`, where they would have
        begun with the right boundary from the start."""
        if step >= RESTART_MIN:
            self.restart_at = step + 1

    def spent(self) -> float:
        """Seconds detail has cost so far (a plain step's time taken off each detail step's)."""
        plain = self.detail_steps * (self.plain or 0.0)
        return max(self.detail_seconds - plain, DETAIL_FLOOR * plain)

    def after(
        self, step: int, seconds: float, elapsed: float, series: Mapping[str, array], probes: Sequence[Probe] = ()
    ) -> tuple[bool | None, DetailReason] | None:
        """`step` ended and took `seconds` (memleak's sampling included), `elapsed` seconds into the
        run; `series` are the live check's columns, `probes` the tracker's (none: the young steps
        never end early). A change of detail from the next step, or None."""
        nxt = step + 1
        self.check_due = False
        if self.restart_at is not None and nxt >= self.restart_at:
            self.restart_at, self.quiet_start, self.next_check = None, False, math.inf
            self.on = self.young = True
            self.young_from = self.screen_from = nxt
            self.until = nxt + YOUNG_STEPS
            return True, DetailReason.RESTART
        if self.on:
            if not self.young:
                self.detail_seconds += seconds
                self.detail_steps += 1
            elif QUIET_AT <= nxt - self.young_from and nxt < self.until and quiet(probes, series):
                self.until = self.screen_from = nxt
                self.next_check = math.ceil(FIRST_CHECK_RATIO * nxt)
                self.quiet_start = True
                self.on = self.young = False
                return False, DetailReason.QUIET
            if nxt < self.until:
                return None
            if self.young:
                self.next_check = math.ceil(FIRST_CHECK_RATIO * nxt)
            self.screen_from = self.until
            self.on = self.young = False
            return False, DetailReason.WINDOW_END
        self.plain = seconds if self.plain is None else 0.9 * self.plain + 0.1 * seconds
        if nxt >= self.next_screen and nxt >= self.growth_at * GROWTH_SPACING:
            if self._screen(nxt, series):
                self.growth_at = nxt
                return self._open(nxt, DetailReason.GROWTH)
        per_window = self._per_window()
        if nxt >= self.screen_from + SAMPLE_GAP and self.spent() + per_window <= SAMPLE_BUDGET * elapsed:
            return self._open(nxt, DetailReason.SAMPLE)
        self.check_due = self.may_check(step)
        return None

    def may_check(self, step: int) -> bool:
        """Whether `after` may ask for a check at the end of `step` (its walk frees and keeps memory
        of memleak's: the tracker reads the heap around it)."""
        return step + 1 >= self.next_check

    def check(
        self, step: int, probes: Sequence[Probe], turn_off: Callable[[Probe, Exception], None]
    ) -> tuple[bool, DetailReason] | None:
        """The check `after` asked for: each probe's `check` at the end of `step` (a probe that fails
        is turned off by `turn_off`); a growth window from the next step when it is the first, after
        a quiet start, to see anything survive or grow, else None."""
        self.check_due = False
        self.next_check = math.ceil(CHECK_RATIO * (step + 1))
        self.checks += 1
        for probe in list(probes):
            try:
                probe.check(step)
            except Exception as e:  # a probe bug must not break the user's training loop
                turn_off(probe, e)
        if self._escalate(probes):
            self.growth_at = step + 1
            return self._open(step + 1, DetailReason.GROWTH)
        return None

    def _escalate(self, probes: Sequence[Probe]) -> bool:
        """Whether the check that ends saw, first in a run whose young steps were quiet, a tensor
        survive its step, a graph outlive its backward or a holder grow (`Probe.quiet`): a window
        follows at once (once a run), to sample what started after the young steps."""
        if not self.quiet_start or all(p.quiet(MIN_DATA_BPS) for p in probes):
            return False
        self.quiet_start = False
        return True

    def _per_window(self) -> float:
        """What one more window is expected to cost: the windows' mean so far, or before the first
        (the young steps are not a window) a guess that errs high."""
        if self.windows:
            return self.spent() / self.windows
        return WINDOW_STEPS * UNMEASURED_DETAIL * (self.plain or 0.0)

    def _screen(self, step: int, series: Mapping[str, array]) -> bool:
        t0 = time.perf_counter()
        seen = screen(series, self.screen_from)
        cost = time.perf_counter() - t0
        self.screen_seconds += cost
        plain = max(self.plain or 0.0, 1e-6)
        # at most SCREEN_ROWS steps on: the first screen that computes a tau imports numpy (a second,
        # once), which would otherwise put the next screen past the run's end, and a leak that starts
        # after it would open no window
        gap = max(SCREEN_EVERY, math.ceil(cost / (SCREEN_BUDGET * plain)))
        self.next_screen = step + min(gap, SCREEN_ROWS)
        return seen

    def _open(self, step: int, why: DetailReason) -> tuple[bool, DetailReason]:
        self.on = True
        self.until = step + WINDOW_STEPS
        self.windows += 1
        return True, why
