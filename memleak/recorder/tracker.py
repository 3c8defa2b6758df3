"""The `Tracker`: starts the probes and installs its hooks, marks each iteration's end and
records its step, and undoes everything on exit, also when the loop raises."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from .. import schema
from ..errors import UsageError
from ..io import RecordSink, RunWriter
from ..probes import Probe, ProbeContext, Unavailable, is_oom, probes_for_level, resolve_device
from ..schema import CHECK_EVENT, DEFAULT_LEVEL, DETAIL_EVENT, HOST_COLUMNS, OWN_COLUMN, Boundary, DetailReason, Level
from . import running, warning_state
from .boundaries import Boundaries
from .escalation import AutoLevel
from .heap_reads import HeapReads, untraced
from .incidents import dump_history, oom_counters, read_now, start_history
from .live import LiveCheck, ReadNow
from .options import checked_options
from .runinfo import base_meta, run_file_path

if TYPE_CHECKING:
    from ..detect.growth import Growth
    from ..report import Report
    from ..run import Run

log = logging.getLogger("memleak")


class Tracker:
    """Records one run. Use through `memleak.track(...)` or `memleak.watch(...)`."""

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        *,
        optimizer: Any = None,
        out: str | os.PathLike | None = None,
        level: str = DEFAULT_LEVEL,
        device: Any = None,
        budget: int | float | str | None = None,
        record_history: bool | int = False,
        on_leak: Callable[[Any], None] | None = None,
        census_budget: float = 0.05,
        workers_budget: float = 0.02,
        overwrite: bool = False,
    ):
        budgets = {"census_budget": census_budget, "workers_budget": workers_budget}
        optimizers = checked_options(model, optimizer, level, budgets, record_history, out)
        from ..units import parse_bytes

        self.level = level
        self.out = None if out is None else Path(out)
        self.overwrite = overwrite  # replace an earlier memleak run at out= (never another file)
        self.budget_bytes = None if budget is None else parse_bytes(budget)
        self.record_history = record_history
        self.on_leak = on_leak
        self._model_ref = weakref.ref(model) if model is not None else (lambda: None)
        # With several optimizers (a GAN), the last one listed ends each iteration.
        self._optimizer_ref: Callable[[], Any] = weakref.ref(optimizers[-1]) if optimizers else (lambda: None)
        self._optimizers = [weakref.ref(o) for o in optimizers]
        self._device_arg = device
        self._budgets = budgets  # the sampled probes' shares of step time
        self._state = "new"
        self._probes: list[Probe] = []
        self._hooks: list[Any] = []
        self._held_records: list[tuple[str, dict[str, Any]]] | None = []  # probe records before the header
        self._boundaries = Boundaries(self._mark, self._in_optimizer)  # what ends an iteration (boundaries.py)
        self._step = 0
        self._live = LiveCheck(functools.partial(running.warned_elsewhere, weakref.ref(self)))
        self._auto = AutoLevel() if level == Level.AUTO else None  # when level auto turns full detail on
        self._lock = threading.RLock()  # steps end one at a time, in order; reentrant for on_leak's step()
        self._heap: Callable[[], int] | None = None  # the C heap counter (live check, OOM)
        self._heap_reads: HeapReads | None = None  # the step ends' reads, and memleak's own bytes on them
        self.sink: RecordSink | None = None

    @property
    def path(self) -> Path | None:
        """The run file (a numbered name when `out=` held an earlier run); None without `out=`,
        or when the file could not be created (the run is then in memory)."""
        sink = self.sink
        return sink.path if isinstance(sink, RunWriter) and sink.has_file else None

    @property
    def leak_confirmed(self) -> bool:
        """Whether the live check confirmed a leak (it warns once, then checks no more)."""
        return self._live.confirmed

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> Tracker:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self.close(exc)
        if exc is None and not self._step:  # a block that ran and recorded nothing: say why at once
            log.warning("memleak: %s", schema.NO_STEPS)
        return False  # never swallow the loop's exception

    def start(self) -> Tracker:
        """Start tracking (``with`` does it): probes, hooks, the run file; returns the tracker."""
        if self._state != "new":
            raise UsageError("this tracker was already started; create a new one for another run")
        self._state = "running"
        running.enter(self)
        try:
            with warning_state.kept():
                self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        model = self._model_ref()
        self.device = resolve_device(self._device_arg, model)
        # before the probes: a step that ends at a call of the model ends before their hooks see it
        self._boundaries.install(model, [o for o in (r() for r in self._optimizers) if o is not None])
        if self.out is not None:
            # never replaces a file: a numbered name beside an earlier run; an unwritable folder
            # leaves the run in memory (path None) with one warning
            self.sink = RunWriter(run_file_path(self.out), overwrite=self.overwrite)
        else:
            self.sink = RecordSink()
        meta = base_meta(self.device, self.level, self.budget_bytes, model)
        skipped = self._start_probes(meta)
        meta["probes"] = [p.name for p in self._probes]
        self.sink.header(meta)
        self.meta = meta
        held, self._held_records = self._held_records, None
        for type_, body in held or ():  # what probes emitted while starting follows the header
            self.sink.record(type_, body)
        for name, why in skipped:
            log.info("memleak: %s probe skipped: %s", name, why)
            self.sink.event("probe_skipped", probe=name, reason=why)
        if self.record_history and not start_history(self.sink, self.record_history):
            self.record_history = False
        from ..probes.host import heap_counter

        self._heap = heap_counter()
        self._heap_reads = None if self._heap is None else HeapReads(self._heap, self.device.type == "cpu")
        if self._heap is None:
            # The live check imports its detector (pandas, scipy) once memory rises; what that
            # import keeps is measured on the C heap and counted as memleak's own. Without a heap
            # counter it cannot be: imported now, before the series begin.
            from ..detect import growth  # noqa: F401
        self._t0 = self._t_step = time.perf_counter()
        if self._auto is not None:
            self._set_detail(0, *self._auto.begin())
        self._begin(0)

    def _start_probes(self, meta: dict[str, Any]) -> list[tuple[str, str]]:
        """Start the level's probes, their header fields into `meta`; those unavailable here
        are stopped again and returned as (name, why)."""
        ctx = ProbeContext(
            device=self.device,
            level=self.level,
            model_ref=self._model_ref,
            optimizer_ref=lambda: self._optimizer_ref(),  # memleak run may follow another optimizer
            emit=self._emit_record,
            options=dict(self._budgets),
            compiled_step=lambda: self._boundaries.compiled,
            host_leaking=lambda: self._live.leaking in HOST_COLUMNS,
        )
        skipped: list[tuple[str, str]] = []
        for probe in probes_for_level(self.level):
            try:
                meta.update(probe.start(ctx))
            except Unavailable as e:
                skipped.append((probe.name, str(e)))
                probe.stop()
                continue
            self._probes.append(probe)
        return skipped

    def _emit_record(self, type_: str, body: dict[str, Any]) -> None:
        """A probe's record; held until the header is written (a run file starts with its header)."""
        if self._held_records is not None:
            self._held_records.append((type_, body))
        else:
            self._started_sink().record(type_, body)

    def close(self, exc: BaseException | None = None) -> None:
        """Stop recording: remove every hook, stop every probe, close the file. Idempotent; waits
        for a step another thread is recording."""
        with self._lock, warning_state.kept():
            running.leave(self)
            self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        if exc is None:
            self._boundaries.flush()  # the last iteration, when a hook saw it end
            if self._state == "closed":  # an on_leak that closed the tracker
                return
        self._state = "closed"
        try:
            if is_oom(exc):
                self._record_oom(exc)
        finally:
            self._boundaries.remove()
            for handle in self._hooks:
                handle.remove()
            self._hooks.clear()
            for probe in self._probes:
                try:
                    try:
                        probe.finish(self._step - 1)
                    finally:
                        probe.stop()
                except Exception as e:  # one probe failing to stop must not keep the others' hooks in
                    log.warning("memleak: %s probe failed to stop: %s", probe.name, e)
            if self.record_history:
                from ..probes import history

                history.stop()
            if self.sink is not None:
                if exc is None:  # ended with memory rising: what a collection gives back (live.py)
                    self._live.collect_at_end(self._step - 1, self.sink, self._read_now())
                self.sink.close()

    @property
    def active(self) -> bool:
        """Whether the tracker is running (started and not closed)."""
        return self._state == "running"

    def _started_sink(self) -> RecordSink:
        """Where records go; start() sets it before any step, check or OOM can use it."""
        assert self.sink is not None
        return self.sink

    # ------------------------------------------------------------ steps
    def step(self) -> None:
        """End the current iteration. Once called, only these calls mark iterations."""
        with self._lock:
            if not self.active:
                raise UsageError("tracker.step() was called outside the tracked block (the tracker is not running)")
            if self._boundaries.on_step_call():  # False: it confirms the optimizer step that just ended one
                self._mark(Boundary.CALL)

    @property
    def iterations(self) -> int:
        """Iterations recorded so far."""
        return self._step

    def _mark(self, kind: Boundary, skipped: bool = False) -> None:
        """End an iteration at a boundary of this kind; a kind other than the last one's is said in
        a ``boundary`` event, a step a GradScaler skipped in a ``step_skipped`` one."""
        with self._lock, warning_state.kept():
            if not self.active:
                return
            sink = self._started_sink()
            if kind is not self._boundaries.kind:
                if self._auto is not None and self._boundaries.kind is Boundary.FORWARD:
                    self._auto.restart(self._step)  # the steps so far were parts of one iteration
                self._boundaries.kind = kind
                sink.event("boundary", kind=kind.value, step=self._step)
            if skipped:
                self._boundaries.skipped += 1
                sink.event("step_skipped", step=self._step)
            self._end_step()

    def _follow_optimizer(self, optimizer: Any) -> None:
        """Let `optimizer` end each iteration from now on; its step now ends one (memleak run)."""
        with self._lock:
            self._optimizer_ref = weakref.ref(optimizer)
            self._boundaries.follow(optimizer)

    def _in_optimizer(self, on: bool) -> None:
        for probe in self._probes:
            probe.in_optimizer(on)

    def _begin(self, step: int) -> None:
        for probe in self._probes:
            probe.step_begin(step)
        self._t_step = time.perf_counter()

    def _end_step(self) -> None:
        now = time.perf_counter()
        seconds = now - self._t_step
        step = self._step
        values: dict[str, Any] = {"step": step, "time": round(now - self._t0, 6), "duration": round(seconds, 6)}
        if self._boundaries.optimizer_steps is not None:
            values["optimizer_steps"] = self._boundaries.optimizer_steps
        sink = self._started_sink()
        plain = self._plain_step()
        heap = self._heap_reads
        if heap is not None:
            # the heap as the user's step left it (heap_reads.py), read where the bookkeeping keeps some
            keeps = lambda: not plain or sink.keeps_next() or self._live.grows_next(step)  # noqa: E731
            values["heap_bytes"] = heap.begin(step, seconds, forced=keeps)
        for probe in list(self._probes):
            try:
                values.update(probe.sample(step, seconds))
            except Exception as e:  # a probe bug must not break the user's training loop
                self._turn_off(probe, e)
        sampled = time.perf_counter() - now
        shift = untraced(values, heap)  # tracemalloc's tables while it traces (probes/alloc_sites.py)
        if heap is not None:
            values[OWN_COLUMN] = heap.own
        sink.step(values)
        live = self._live
        live.append(step, values)
        change = None
        if self._auto is not None:  # its growth screen imports numpy the first time: memleak's own too
            change = self._auto.after(step, seconds + sampled, now - self._t0, live.series, self._probes)
            if self._auto.check_due:  # the reference walk at this step's end (escalation.py)
                self._started_sink().event(CHECK_EVENT, step=step)
                change = self._auto.check(step, self._probes, self._turn_off)
        if heap is not None:  # what the probes and this bookkeeping kept on the heap is memleak's own
            heap.settle(live.grew or sink.keeps_steps or not plain, live.grew or sink.flushed or not plain, shift)
        if change is not None:
            self._set_detail(step + 1, *change)
        self._step = step = step + 1
        if step >= live.next_at and live.due(step, now - self._t0):
            live.run(step, self.meta, self._started_sink(), self._read_now(), self._on_leak_confirmed)
            if heap is not None:
                heap.own += int(live.own_delta)  # what it kept on the heap (see LiveCheck.run)
            live.own_delta = 0.0
        if self.active:  # on_leak may have closed the tracker: install nothing after close
            self._begin(step)

    def _read_now(self) -> ReadNow:
        """Reads a memory column again now, less memleak's own bytes on the heap (the live checks')."""
        own = self._heap_reads.own_bytes if self._heap_reads is not None else lambda: 0.0
        return functools.partial(read_now, heap=self._heap, own=own, device=self.device)

    def _plain_step(self) -> bool:
        """Whether the step that ends recorded the counters alone (no probe's detail, no check)."""
        auto = self._auto
        return self.level == Level.COUNTERS or (auto is not None and not auto.on and not auto.may_check(self._step))

    def _set_detail(self, step: int, on: bool | None, why: DetailReason) -> None:
        """Level auto: the sampled probes' detail on or off from `step` (None: on level full's own
        schedule, as they started), said in the run."""
        for probe in list(self._probes):
            if on is None:  # as they started: nothing to change
                break
            try:
                probe.set_detail(step, on)
            except Exception as e:  # a probe bug must not break the user's training loop
                self._turn_off(probe, e)
        level = Level.COUNTERS if on is False else Level.FULL
        self._started_sink().event(DETAIL_EVENT, step=step, level=level.value, reason=why.value)

    def _turn_off(self, probe: Probe, error: Exception) -> None:
        """A probe that failed: stopped and dropped, and said in the log and the run."""
        self._probes.remove(probe)
        probe.stop()
        log.warning("memleak: %s probe failed and was turned off: %s", probe.name, error)
        self._started_sink().event("probe_failed", probe=probe.name, step=self._step, error=repr(error))

    # ------------------------------------------------------------ live warning
    def _on_leak_confirmed(self, growth: Growth) -> None:
        """After the live check's warning: the leak snapshot, then the user's on_leak."""
        if self.record_history and self.path is not None:
            dump_history(self._started_sink(), self.path, "leak-snapshot.pickle", self._step)
        if self.on_leak is not None:
            self.on_leak(growth)

    def _record_oom(self, exc: BaseException) -> None:
        counters = oom_counters(self.device)
        self._started_sink().event("oom", step=self._step, message=str(exc).splitlines()[0][:500], **counters)
        if self.record_history and self.path is not None:
            dump_history(self._started_sink(), self.path, "oom-snapshot.pickle", self._step)

    # ------------------------------------------------------------ results
    def run(self) -> Run:
        """The run recorded so far, as a `memleak.Run`."""
        if self.sink is None:
            raise UsageError("nothing was recorded: the tracker was never started")
        if isinstance(self.sink, RunWriter):
            return self.sink.read()
        from ..io import run_from_records

        return run_from_records(self.sink.records)

    def report(self) -> Report:
        """Analyse what was recorded so far; see `memleak.analyze`."""
        from ..analysis import analyze

        with warning_state.kept():
            return analyze(self.run())


def track(model: torch.nn.Module | None = None, **options: Any) -> Tracker:
    """Context manager that records a run: ``with memleak.track(model, optimizer=opt) as t: ...``."""
    return Tracker(model, **options)
