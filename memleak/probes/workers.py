"""The memory of DataLoader worker processes: their proportional set size (PSS) and their
private memory, each step.

A Dataset of Python lists or dicts is copied page by page into every forked worker as the
workers touch the objects' reference counts. That growth is in the workers, not in this
process, and it shows in their private memory (``/proc/PID/smaps_rollup``: Private_Clean +
Private_Dirty, the pages no other process maps: each copied page lands there) and in their PSS
(a page shared by n processes counts 1/n in each), not in their RSS, which counts shared pages
whole and stays flat. The private series is the one to judge: PSS also carries each worker's
share of this process's pages, so a large main process hides the copy in a large level.

A worker that allocates memory of its own as it runs (a Dataset that memoizes what
``__getitem__`` decodes, a collate_fn that appends to a list) grows in its RSS too, which
copy-on-read does not move. RSS is read from ``/proc/PID/statm`` (a few microseconds: no page
walk) as this process's own is (`host.py`): every step at first, then every 4th, so that a short
run has the points a trend needs where the budget allows a handful of smaps reads.

Reading smaps_rollup makes the kernel walk the worker's page tables: 3 to 10 ms a worker on a
loaded 2-core machine. So the reads run on a time budget (``workers_budget=``, a share of the
run's time, 2 % by default): a step without a read writes null. The workers' first 34 steps
are read every 3rd step whatever the budget (a start-up cost: 12 reads), so that a short run has
the points a trend needs. Finding which DataLoader new
workers belong to happens once per set of workers (probes/loaders.py). Linux only: elsewhere
the probe is skipped.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..schema import WORKER_PRIVATE, WORKER_PSS, WORKER_RSS, RecordType
from . import Probe, ProbeContext, Unavailable
from .budget import TimeBudget
from .host import PAGE, RSS_DENSE_STEPS, RSS_EVERY, statm_rss
from .loaders import LoaderInfo, child_pids, identify, no_children

#: The workers' private memory is read every YOUNG_EVERY-th step of their first YOUNG_STEPS,
#: whatever the budget: 12 reads, the 8 points a trend needs after a warm-up of a few.
YOUNG_STEPS = 34
YOUNG_EVERY = 3
#: How many bytes of smaps_rollup to read: Private_Dirty is its eleventh line (about 400 bytes in).
READ_BYTES = 1024


def _field(data: bytes, name: bytes) -> int | None:
    """The value of one "Name:   123 kB" line of smaps_rollup, in bytes, or None."""
    at = data.find(b"\n" + name + b":")
    if at < 0:
        return None
    return int(data[at + len(name) + 2 :].split(None, 1)[0]) * 1024


def read_memory(fd: int) -> tuple[int | None, int | None]:
    """(PSS, private bytes) from an open smaps_rollup (re-read from its start); None where absent."""
    data = os.pread(fd, READ_BYTES, 0)
    clean, dirty = _field(data, b"Private_Clean"), _field(data, b"Private_Dirty")
    private = None if clean is None or dirty is None else clean + dirty
    return _field(data, b"Pss"), private


class WorkerProbe(Probe):
    name = "workers"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/smaps_rollup"):
            raise Unavailable("worker memory is read from /proc/PID/smaps_rollup (Linux 4.14 or later)")
        self.ctx = ctx
        self.budget = float(ctx.options.get("workers_budget", 0.02))
        self.known: set[int] = set()  # child PIDs already looked at, workers or not
        self.fds: dict[int, int] = {}  # worker PID -> its smaps_rollup, kept open
        self.statm: dict[int, int] = {}  # worker PID -> its statm, kept open
        self.slot_of: dict[int, int] = {}  # worker PID -> its column slot
        self.slots: dict[tuple[str, int], int] = {}  # (loader, worker index) -> slot, kept across epochs
        self.reads = TimeBudget(self.budget)  # started when the first workers are seen
        self.first_step: int | None = None  # the step the first workers were seen at
        return {"workers_budget": self.budget}

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        if not self.known and not self.slots and no_children():
            return {}
        kids = child_pids()
        new = {pid: p for pid, p in kids.items() if pid not in self.known}
        self.known = set(kids)
        for pid in [p for p in self.fds if p not in kids]:  # a worker exited (an epoch ended)
            self._forget(pid)
        if new:
            self._add(step, identify(new, sys._getframe(1)))
        if not self.slots:
            return {}
        values: dict[str, Any] = {"workers": len(self.fds), "worker_pss_bytes": None, "worker_private_bytes": None}
        for s in self.slots.values():
            values[WORKER_PSS.format(s)] = values[WORKER_PRIVATE.format(s)] = values[WORKER_RSS.format(s)] = None
        if self.fds and (self.reads.due() or self._young(step)):
            self.reads.timed(lambda: self._read(values))
        if step < RSS_DENSE_STEPS or step % RSS_EVERY == 0:
            self._read_rss(values)
        return values

    def _young(self, step: int) -> bool:
        """A read the budget may not have earned yet: every YOUNG_EVERY-th step of the workers'
        first YOUNG_STEPS, so that a short run has the points a trend needs (a start-up cost, paid
        once; later reads wait until the budget has paid for these)."""
        age = step - (step if self.first_step is None else self.first_step)
        return age < YOUNG_STEPS and age % YOUNG_EVERY == 0

    def _read_rss(self, values: dict[str, Any]) -> None:
        """Each worker's RSS into `values` (a worker that exited since is forgotten next step)."""
        for pid, fd in list(self.statm.items()):
            try:
                values[WORKER_RSS.format(self.slot_of[pid])] = statm_rss(fd)
            except (OSError, IndexError, ValueError):
                continue

    def _read(self, values: dict[str, Any]) -> None:
        """Each worker's PSS and private bytes into `values`, and their sums."""
        totals = {"worker_pss_bytes": 0, "worker_private_bytes": 0}
        for pid, fd in list(self.fds.items()):
            try:
                read = read_memory(fd)
            except OSError:  # it exited since: next step forgets it
                continue
            for total, pattern, nbytes in zip(totals, (WORKER_PSS, WORKER_PRIVATE), read, strict=True):
                if nbytes is not None:
                    values[pattern.format(self.slot_of[pid])] = nbytes
                    totals[total] += nbytes
        values.update(totals)

    def _add(self, step: int, found: dict[int, tuple[LoaderInfo, int]]) -> None:
        """Open each new worker's smaps_rollup, give it a column slot, and say which DataLoader
        the new workers belong to (one event per loader)."""
        by_loader: dict[LoaderInfo, list[tuple[int, int]]] = {}
        for pid, (info, index) in found.items():
            try:
                fd = os.open(f"/proc/{pid}/smaps_rollup", os.O_RDONLY)
            except OSError:
                continue
            self.fds[pid] = fd
            try:
                self.statm[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
            except OSError:
                pass
            slot = self.slots.setdefault((info.name, index), len(self.slots))
            self.slot_of[pid] = slot
            by_loader.setdefault(info, []).append((pid, slot))
        if by_loader:
            self.reads.start()
            if self.first_step is None:
                self.first_step = step
        for info, workers in by_loader.items():
            workers.sort(key=lambda w: w[1])
            details = {"step": step, "loader": info.name, "dataset": info.dataset, "dataset_len": info.dataset_len}
            details.update(dataset_objects=info.dataset_objects, page_bytes=PAGE)
            details.update(
                num_workers=info.num_workers,
                steps_per_epoch=info.steps_per_epoch,
                persistent=info.persistent,
                start_method=info.start_method,
                pids=[w[0] for w in workers],
                columns=[WORKER_PSS.format(w[1]) for w in workers],
                private_columns=[WORKER_PRIVATE.format(w[1]) for w in workers],
                rss_columns=[WORKER_RSS.format(w[1]) for w in workers],
            )
            from ..records import Event  # here: records' dataclasses take 10 ms to import, level counters needs none

            self.ctx.emit(RecordType.EVENT, Event("dataloader_workers", details).to_dict())

    def _forget(self, pid: int) -> None:
        self.slot_of.pop(pid, None)
        for fds in (self.fds, self.statm):
            fd = fds.pop(pid, None)
            if fd is not None:
                os.close(fd)

    def stop(self) -> None:
        for pid in list(getattr(self, "fds", {})):
            self._forget(pid)
