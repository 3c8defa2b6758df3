"""Where growing host memory is allocated, by line of the user's code: tracemalloc over a few steps
once the live check takes host memory for a leak.

The reference walk names what keeps tensors and Python data, but not what a library keeps in
state of its own that no root of the walk leads to (pyplot's list of open figures, a C
extension's registry): there the growth has no holder to name. tracemalloc sees every
allocation Python and numpy make, with the stack that made it; grouped by the innermost frame
of the user's code on that stack, the blocks made over a few steps and still alive at their end
name the line that makes what is kept (``plt.figure()`` in the loop) and the library that keeps it.

It runs only when it has something to find, since tracing slows every allocation the program
makes (and empties the host reads of the steps it traces): once the live check (recorder/live.py)
takes the host heap or RSS for a leak, at the next step screened (every `SCREEN_EVERY`-th from
`FIRST_STEP`; at level auto only on its detail steps, whose rows its growth screen leaves out),
tracing starts (`NFRAMES` frames a block, deep enough to reach the user's line from inside a
library), the blocks alive one step later are grouped, and again `TRACE_STEPS` steps later; what
each line gained in between is an ``alloc_sites`` event (`detect/alloc_sites.py` judges it). At
most `MAX_TRACES` windows a run, the second only once the run is `LATER` times as
long as at the first (a rise at the start is often a warm-up). tracemalloc's tables are on the C
heap while it traces, a few dozen bytes a live block more than it reports: the host reads of the
traced steps are left empty (`sample` returns ``TRACING``; recorder/heap_reads.untraced), and
starting and stopping are no bookkeeping of memleak's that stays. A program that traces itself
is left alone: the probe stays off.
"""

from __future__ import annotations

import linecache
import tracemalloc
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..records import Event
from ..schema import ALLOC_SITES_EVENT, TRACING, RecordType
from . import Probe, ProbeContext, Unavailable
from .frames import is_user_file

#: Steps before the first look at the live check's verdict, and steps between looks.
FIRST_STEP = 16
SCREEN_EVERY = 4
#: Frames kept per traced block: a library's allocation is often 20 calls below the user's line.
NFRAMES = 48
#: Steps between the two looks at the traced blocks (the first look comes one step after tracing starts).
TRACE_STEPS = 4
#: ... and the fewest a window cut short (by a detail window's end, or the run's) is compared over: one
#: step's blocks alive at a boundary are as much that step's as what it keeps (FSDP2's forward on gloo,
#: 12.7 KiB "gained" in one step against a heap that grew 4.4 KiB a step).
MIN_COMPARED = 2
MAX_TRACES = 2
LATER = 4
#: Lines reported per window, the largest gains first.
TOP_SITES = 8

#: (the user's line, the library below it) -> [bytes, blocks] of the traced blocks alive
Sites = dict[tuple[str, str], list[int]]

_MEMLEAK_DIR = str(Path(__file__).resolve().parents[1]) + "/"


class AllocSitesProbe(Probe):
    name = "sites"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        if tracemalloc.is_tracing():
            raise Unavailable("tracemalloc is already tracing in this process (the program's own use is left alone)")
        self.ctx = ctx
        self.traces = 0
        self.tracing_from: int | None = None  # the step tracing started after
        self.first: Sites | None = None  # the first look's blocks by site
        self.first_step = 0
        self.next_screen: float = FIRST_STEP
        self.stopped = False  # tracing stopped since the last sample
        self.detail = True  # level auto's detail steps (young ones and windows): the only ones it traces
        return {}

    def set_detail(self, step: int, on: bool) -> None:
        """Level auto: traced only in detail steps, whose host rows its growth screen leaves out (a
        traced step's are empty); a window that ends cuts the tracing short."""
        self.detail = on
        if not on and self.tracing_from is not None:
            if self._comparable(step - 1):
                self._report(step - 1)
            else:  # too short to compare two looks
                self._stop()
                self.first = None

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        before = self._traced()
        self._advance(step)
        after = self._traced()
        # whether the step's host reads saw tracemalloc's tables, what this sample changed of them,
        # and whether tracing stopped since the last sample
        stopped, self.stopped = self.stopped, False
        return {TRACING: (before > 0, after - before, stopped)} if before or after or stopped else {}

    def _traced(self) -> int:
        return tracemalloc.get_tracemalloc_memory() if self.tracing_from is not None else 0

    def _advance(self, step: int) -> None:
        """Screen, start tracing, take the first look, or report and stop, as the step asks."""
        if self.tracing_from is None:
            if self.detail and step >= self.next_screen:
                self.next_screen = step + SCREEN_EVERY
                if self.ctx.host_leaking():
                    self._begin(step)
        elif self.first is None:
            self.first, self.first_step = _sites(), step
        elif step - self.first_step >= TRACE_STEPS:
            self._report(step)

    def _begin(self, step: int) -> None:
        tracemalloc.start(NFRAMES)
        self.tracing_from = step
        self.traces += 1

    def _report(self, step: int) -> None:
        last = _sites()
        self._stop()
        first, self.first = self.first or {}, None
        gains = []
        for site, (size, count) in last.items():
            before = first.get(site, [0, 0])
            if size > before[0]:
                gains.append((size - before[0], count - before[1], site))
        gains.sort(reverse=True)
        rows = [[site, lib, size, count, _code(site)] for size, count, (site, lib) in gains[:TOP_SITES]]
        body = {"step": step, "since": self.first_step, "sites": rows, "nframe": NFRAMES}
        self.ctx.emit(RecordType.EVENT, Event(ALLOC_SITES_EVENT, body).to_dict())
        self.next_screen = step * LATER if self.traces < MAX_TRACES else float("inf")

    def _stop(self) -> None:
        if self.tracing_from is not None:
            tracemalloc.stop()
            self.tracing_from = None
            self.stopped = True

    def finish(self, step: int) -> None:
        # a window the run ends in (a short run) is compared at its end, if MIN_COMPARED steps
        # passed since the first look: its lines are all a short run may get
        if self.tracing_from is not None and self._comparable(step):
            self._report(step)
        self._stop()

    def _comparable(self, step: int) -> bool:
        """Whether a window cut short at `step` spans MIN_COMPARED steps since its first look."""
        return self.first is not None and step - self.first_step >= MIN_COMPARED

    def stop(self) -> None:
        if getattr(self, "tracing_from", None) is not None:
            self._stop()


def _sites() -> Sites:
    """The traced blocks alive now, by (the user's line that made them, the library below it):
    [bytes, blocks]. Blocks memleak made (its code inside the user's line) are left out."""
    out: Sites = defaultdict(lambda: [0, 0])
    for stat in tracemalloc.take_snapshot().statistics("traceback"):
        site = _site(stat.traceback)
        if site is not None:
            acc = out[site]
            acc[0] += stat.size
            acc[1] += stat.count
    return dict(out)


def _site(tb: tracemalloc.Traceback) -> tuple[str, str] | None:
    """(file:line of the innermost frame of the user's code, the package of the frame below it) of
    one stack (tracemalloc lists frames oldest first); the innermost frame where no user frame is;
    None for memleak's own (its code below the user's line: memleak's code above it is `memleak
    run` running the script)."""
    # the (filename, lineno) pairs it keeps: 48 Frame objects a stack cost more than the rest
    frames = getattr(tb, "_frames", None) or [(f.filename, f.lineno) for f in tb]
    below = ""  # the file the user's line called into
    for filename, lineno in reversed(frames):
        whose = _whose(filename)
        if whose is _MEMLEAK:
            return None
        if whose is _USER:
            return f"{filename}:{lineno}", _package(below) if below else ""
        below = filename
    filename, lineno = frames[-1]
    return f"{filename}:{lineno}", _package(filename)


_MEMLEAK, _USER, _OTHER = "memleak", "user", "other"


@lru_cache(maxsize=4096)
def _whose(filename: str) -> str:
    """Whose code a file is: memleak's (tracemalloc's own snapshot counts as memleak's), the user's, or a library's."""
    if filename.startswith(_MEMLEAK_DIR) or filename == tracemalloc.__file__:
        return _MEMLEAK
    return _USER if is_user_file(filename) else _OTHER


@lru_cache(maxsize=4096)
def _package(filename: str) -> str:
    """The installed package a file belongs to (``.../site-packages/matplotlib/figure.py`` ->
    matplotlib); the file's name where it is in none, nothing for code compiled from a string."""
    if filename.startswith("<"):
        return ""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            return parts[i + 1].removesuffix(".py") if i + 1 < len(parts) else ""
    return Path(filename).stem


def _code(site: str) -> str:
    filename, _, line = site.rpartition(":")
    return linecache.getline(filename, int(line)).strip() if line.isdigit() else ""
