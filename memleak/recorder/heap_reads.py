"""The C heap read at step ends, on a time budget where it is not the run's own memory.

glibc's mallinfo2 walks every free chunk of every arena: about 40 us a read in a quiet
one-thread process, hundreds with a few threads' arenas or a fragmented heap, more than all
the other counters of a step together, and it sweeps the caches the user's next step runs in.
On a GPU run it is the host side, where few leaks grow, on steps of a few milliseconds: after
the first `DENSE_STEPS` (read every step: a short run, the auto level's young steps and their
screen need every row) a step's heap is read only when the step time earned since the last read
pays for one at `HEAP_BUDGET`, and at least every `MAX_GAP` steps; the other steps'
``heap_bytes`` is empty (NaN), as a census column is between censuses. On a CPU run the heap is
where the tensors live, the run's memory itself (as the allocator's counters are on a GPU): its
budget is `CPU_HEAP_BUDGET`, which pays for a read every step unless the heap is so fragmented
that a read costs a large share of a step (a program that keeps every step's autograd graph of
800 blocks: 33 ms a read on 60 ms steps, doubling the run's time).

memleak's own bytes (`own`, taken off the host series) are measured on the heap around its
bookkeeping in a step that may keep some (a detail step, a batch of steps written, the live
columns given more room): such a step is always read (`forced`).
"""

from __future__ import annotations

import collections
import gc
import time
from collections.abc import Callable

from ..schema import HOST_COLUMNS, TRACING

#: Reads may cost this share of the step time...
HEAP_BUDGET = 0.002
#: ...on a CPU run, where the heap is the run's memory, this share, and a read that costs at most
#: CPU_READ_FREE seconds is made every step whatever the share (a quiet heap reads in 40 us, the
#: 250 MiB heap of a test suite's process in 0.5 ms, 3 at worst: what a loop of tiny steps, a
#: test's, pays already, and a series it must keep whole)...
CPU_HEAP_BUDGET = 0.1
CPU_READ_FREE = 2e-3
#: ...once the first DENSE_STEPS steps, each of them read, are over...
DENSE_STEPS = 32
#: ...and the heap is read at least every MAX_GAP steps, whatever a read costs.
MAX_GAP = 16


class HeapReads:
    """One run's heap reads: `begin` at a step's end before the probes sample (the heap as the
    user's step left it, or None when this step is not read), `settle` after memleak's
    bookkeeping."""

    def __init__(self, counter: Callable[[], int], run_memory: bool) -> None:
        self.counter = counter
        self.share = CPU_HEAP_BUDGET if run_memory else HEAP_BUDGET  # run_memory: a CPU run's
        self.free = CPU_READ_FREE if run_memory else 0.0  # a read this cheap is always made
        self.own = 0  # memleak's own bytes on the heap so far
        self.cost = self.last = 0.0  # seconds a read takes (the last reads, smoothed; the last one)
        self.credit = 0.0  # step time's share earned and not yet spent on reads
        self.since = 0  # steps since the last read
        self.base: int | None = None  # this step's read
        self.collections = 0  # the cyclic garbage collector's collections at that read
        # the last reads (step, heap less memleak's own), and the one before tracemalloc started with
        # the slope then, until the first read after it stopped (`traced`)
        self.recent: collections.deque[tuple[int, int]] = collections.deque(maxlen=9)
        self.window: tuple[int, int, float] | None = None
        self.closed = False

    def own_bytes(self) -> float:
        return self.own

    def read(self) -> int:
        """A read now, its time counted."""
        t0 = time.perf_counter()
        value = self.counter()
        took = time.perf_counter() - t0
        self.cost = took if not self.cost else 0.8 * self.cost + 0.2 * took
        self.last = took
        self.credit = min(self.credit, self.cost) - took  # paid for; no credit saved up
        return value

    def begin(self, step: int, step_seconds: float, forced: Callable[[], bool]) -> int | None:
        """The heap at the end of `step` (which took `step_seconds`), or None when it is not read:
        `forced()`, memleak's bookkeeping in this step may keep bytes on the heap (asked only where
        the step is not read anyway)."""
        self.credit += step_seconds * self.share
        self.since += 1
        # cheap: the smoothed cost or the last read (one read slowed by a loaded machine is no trend)
        due = self.since >= MAX_GAP or self.credit >= self.cost or min(self.cost, self.last) <= self.free
        if step < DENSE_STEPS or due or forced():
            self.since = 0
            self.base = self.read()
            self.collections = _collections()
            self._after_window(step, self.base - self.own)  # may take the window's rise off first
            self.recent.append((step, self.base - self.own))
        else:
            self.base = None
        return self.base

    def settle(self, kept: bool, frees: bool = True, shift: int = 0) -> None:
        """After the step's bookkeeping: `kept`, it may have kept bytes on the heap, read again
        (~25 us) when this step was read (it was, if it was forced). `frees`: it may also have
        released some of memleak's (a batch written, the live columns moved, a detail step's
        walk); where it cannot have, a fall is another thread's frees meanwhile (a consumer thread
        evicting a tensor as the step ends), not memleak's, and is not taken off its bytes. `shift`:
        bytes the bookkeeping moved that are counted apart (tracemalloc's, started or stopped)."""
        if kept and self.base is not None:
            delta = self.counter() - self.base - shift
            # a collection that memleak's own objects set off frees the user's garbage too (an
            # awaitable in a reference cycle): a fall then is not memleak's to take off its bytes
            frees = frees and _collections() == self.collections
            self.own += delta if delta >= 0 or frees else 0

    def traced(self, step: int, seen: bool, shift: int, stopped: bool) -> None:
        """tracemalloc started at the end of `step` (its read came before), or stopped."""
        if shift > 0 and not seen and self.base is not None and len(self.recent) >= 3:
            steps, vals = zip(*self.recent, strict=True)
            slopes = sorted((b - a) / (t - s) for s, t, a, b in zip(steps, steps[1:], vals, vals[1:], strict=False))
            self.window, self.closed = (step, self.base - self.own, slopes[len(slopes) // 2]), False
        self.closed = self.closed or stopped

    def _after_window(self, step: int, value: int) -> None:
        """The first read after tracing: what the program made while traced can take more of the C
        heap than untraced, for as long as it lives (5 traced steps of a loop opening pyplot figures
        left 2.0 MiB where 5 untraced ones left 0.55), so the rise beyond the trend of the reads
        before the window is memleak's: a step the detectors would take for the program's."""
        if self.window is None or not self.closed:
            return
        s0, h0, slope = self.window
        self.window = None
        self.own += max(0, int(value - (h0 + slope * (step - s0))))


def _collections() -> int:
    """Collections the cyclic garbage collector has run so far, of every generation."""
    return sum(g["collections"] for g in gc.get_stats())


def untraced(values: dict, heap: HeapReads | None) -> int:
    """A step's values without what tracemalloc's tables put in them (probes/alloc_sites.py): its
    host reads emptied where they saw the tables; the bytes of them the sampling started or freed
    (for `HeapReads.settle`), 0 where it did neither."""
    traced = values.pop(TRACING, None)
    if traced is None:
        return 0
    seen, shift, stopped = traced
    if heap is not None:
        heap.traced(int(values.get("step", 0)), seen, shift, stopped)
    if seen:
        for col in HOST_COLUMNS:
            if col in values:
                values[col] = None
    return shift
