"""Writing run files: a header, then records appended: steps in small batches (one write per
FLUSH_STEPS steps or FLUSH_SECONDS, whichever comes first: a write a step cost a training step
about 20 us with cold caches), every other record at once, so a run killed mid-way (an OOM,
kill -9) loads up to its last batch, less than a second before it died. No pickle is ever
written, no file is ever replaced, and an I/O error stops the recording, never the training."""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..schema import EVENT, HEADER, SCHEMA_VERSION
from .runfiles import create_run_file
from .step_lines import StepLines

if TYPE_CHECKING:  # reading back imports pandas: only when a run is read
    from ..run import Run

log = logging.getLogger("memleak")

#: Records kept in memory after the file could not be written (a bound on memleak's own memory).
MEMORY_RECORDS = 200_000
#: Steps are held back and written together, at most this many...
FLUSH_STEPS = 16
#: ...and for at most this long (a slow step is written at once).
FLUSH_SECONDS = 0.5


class RecordSink:
    """Keeps records in memory; the base of RunWriter. `records` is what a Run is built from.

    Steps are kept as a run file's step lines (`StepLines`: change-masked arrays, 25 bytes a step
    at counters) in one buffer on the C heap, where memleak measures its own bytes, not as a dict each
    (320 bytes a step in Python's own arenas, outside the heap: a 30,000-step run's records read as
    a leak in RSS); the other records stay dicts, with the count of the steps between them."""

    #: Whether a step may leave records of memleak's on the heap (a step kept in memory; a batch
    #: written): the tracker then measures its own bytes after the step, which costs a heap read.
    keeps_steps = True
    #: Whether the last step sent a batch out, releasing the records it held (RunWriter).
    flushed = False

    def __init__(self) -> None:
        self._records: list[dict | int] = []  # a record, or the number of steps kept in a row
        self._memory_lines = StepLines()
        self._step_lines = bytearray()  # the steps' lines, each ended by a newline

    @property
    def records(self) -> list[dict]:
        """Every record so far (header, delta-encoded steps, events, ...), as dicts."""
        if not self._step_lines:
            return self._records  # type: ignore[return-value]  # no counts without steps
        steps = iter(_decode_steps(self._step_lines))
        out: list[dict] = []
        for r in self._records:
            if type(r) is int:
                out.extend(itertools.islice(steps, r))
            else:
                out.append(r)  # type: ignore[arg-type]
        return out

    def keeps_next(self) -> bool:
        """Whether the next `step` will keep records of memleak's on the heap (`keeps_steps`): the
        tracker then reads the heap before it (a read is skipped on other steps)."""
        return True

    def header(self, meta: dict[str, Any]) -> None:
        self._emit({"type": HEADER, "schema": SCHEMA_VERSION, **meta})

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values; only those that changed since the last step are kept."""
        for line in self._memory_lines.lines(values):
            self._step_lines += line.encode()
            self._step_lines += b"\n"
        if self._records and type(self._records[-1]) is int:
            self._records[-1] += 1  # type: ignore[operator]
        else:
            self._records.append(1)

    def record(self, type_: str, body: dict[str, Any]) -> None:
        self._emit({"type": type_, **body})

    def event(self, name: str, **body: Any) -> None:
        self.record(EVENT, {"event": name, **body})

    def _emit(self, rec: dict) -> None:
        self._records.append(rec)

    def close(self) -> None:
        pass


def _decode_steps(lines: bytearray) -> list[dict]:
    """The step records that `RecordSink.step` kept as lines, decoded as a run file's are."""
    from .reader import decode_lines

    header = json.dumps({"type": HEADER, "schema": SCHEMA_VERSION}).encode()
    records, _, _ = decode_lines(Path("<memory>"), ([header, *bytes(lines).split(b"\n")[:-1]], True), "raise")
    return records[1:]


class RunWriter(RecordSink):
    """Appends each record to a JSON Lines file: steps in batches (`flush`), the rest at once.

    It keeps no records in memory (a long run would grow) while the file can be written.
    A new run never replaces a file: see `create_run_file` (``path`` is the one used). An
    I/O error (a full disk, a read-only folder) never reaches the training loop: writing
    stops, one warning names the file and the error, the file is left ending at its last
    whole record, and the rest of the run is kept in memory (up to `MEMORY_RECORDS`).
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        super().__init__()
        self.path = Path(path)
        self.has_file = False  # whether a run file was created (the rest may be in memory)
        self.stopped: str | None = None  # why writing stopped, said in the run's problems
        self._dropped = 0
        self._kept_steps = 0
        self._closed = False
        self._fh: Any = None
        self._lines = StepLines()
        self._pending: list[dict[str, Any]] = []  # steps held back for the next write (`flush`)
        self._pending_since = 0.0
        self._flush_next: bool | None = None  # what `keeps_next` said of the next step
        self._pid = os.getpid()
        try:
            self.path, self._fh = create_run_file(self.path, overwrite)
            self.has_file = True
        except OSError as e:
            self._stop(e, None)

    @property
    def records(self) -> list[dict]:
        """The file's records, then those kept in memory after writing stopped."""
        self.flush()
        kept = RecordSink.records.fget(self)  # type: ignore[attr-defined]
        if not self.has_file:
            return kept
        from .reader import decode_lines, split_lines

        records, _, _ = decode_lines(self.path, split_lines(self.path.read_bytes()), errors="skip")
        return records + kept

    def read(self) -> Run:
        """The run recorded so far: the file, and what memory kept after writing stopped."""
        from .reader import read_run_file, run_from_records

        self.flush()
        if self.stopped is None:
            return read_run_file(self.path)
        problem = self.stopped
        if self._dropped:
            problem += f"; the last {self._dropped} records were not kept (memory is bounded)"
        return run_from_records(self.records, path=str(self.path) if self.has_file else None, problems=[problem])

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values (a dict no one changes afterwards), written with the next batch."""
        if self._fh is None:
            self.keeps_steps = True
            self._keep_step(values)
            return
        flush = self.keeps_next() if self._flush_next is None else self._flush_next
        self._flush_next = None
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(values)
        self.keeps_steps = self.flushed = flush
        if flush:  # a batch goes out: the tracker reads the heap it left behind
            self.flush()

    def keeps_next(self) -> bool:
        """Whether the next step sends a batch out (FLUSH_STEPS steps held, or the first held
        FLUSH_SECONDS ago); that step then decides as this said, whatever the clock reads by then."""
        if self._fh is None:
            return True
        held = len(self._pending)
        late = held > 0 and time.monotonic() - self._pending_since >= FLUSH_SECONDS
        self._flush_next = held + 1 >= FLUSH_STEPS or late
        return self._flush_next

    def flush(self) -> None:
        """Write the steps held back so far, in one write; after an I/O error, keep them in memory."""
        pending, self._pending = self._pending, []
        if not pending or os.getpid() != self._pid:  # a forked child: its parent writes the steps
            return
        if self._fh is not None:
            try:
                self._put("\n".join([line for values in pending for line in self._lines.lines(values)]))
                return
            except OSError as e:
                self._stop(e, pending[0].get("step"))
        for values in pending:
            self._keep_step(values)

    def _keep_step(self, values: dict[str, Any]) -> None:
        """A step kept in memory once the file cannot be written, up to MEMORY_RECORDS of them."""
        if self._kept_steps < MEMORY_RECORDS:
            self._kept_steps += 1
            RecordSink.step(self, values)
        else:
            self._dropped += 1

    def _emit(self, rec: dict) -> None:
        self.flush()  # the steps before it first, in order
        if self._fh is not None:
            try:
                self._put(json.dumps(rec, separators=(",", ":"), default=str))
                return
            except OSError as e:
                last = self._lines.last_step()
                self._stop(e, None if last is None else last + 1)
        if self._closed:
            return
        if len(self._records) < MEMORY_RECORDS:
            self._records.append(rec)
        else:
            self._dropped += 1

    def _put(self, line: str) -> None:
        """Write one line; OSError when it cannot be (then no part of it stays in the file)."""
        data = (line + "\n").encode()
        n = self._fh.write(data)
        if n != len(data):
            self._put_rest(data, n or 0)

    def _put_rest(self, data: bytes, n: int) -> None:
        """Finish a short write (a disk filling up); on an error, cut the line's start off again
        so that the file ends with a whole record."""
        fh = self._fh
        try:
            while n < len(data):
                k = fh.write(data[n:])
                if not k:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                n += k
        except OSError:
            try:
                fh.truncate(fh.tell() - n)
            except OSError:
                pass  # the reader drops a last line cut short anyway
            raise

    def _stop(self, error: OSError, step: int | None) -> None:
        """Stop writing after an I/O error: close the file and warn once; the training goes on."""
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                empty = os.fstat(fh.fileno()).st_size == 0
            except OSError:
                empty = False
            with contextlib.suppress(OSError):
                fh.close()
            if empty:  # not even the header: leave no empty run file for load() to trip on
                with contextlib.suppress(OSError):
                    self.path.unlink()
                    self.has_file = False
        if self.has_file:
            where = "before the first step" if step is None else f"at step {step}"
            self.stopped = (
                f"recording to {self.path} stopped {where} ({error}): the file holds the steps before it, "
                "the rest of the run was kept in memory"
            )
        else:
            self.stopped = f"the run could not be written to {self.path} ({error}): it was recorded in memory only"
        log.warning("memleak: %s; the training is not affected", self.stopped)

    def close(self) -> None:
        """Close the file (never raises: the run's own exception, if any, must stay the one seen)."""
        self.flush()
        self._closed = True
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError as e:
                log.warning("memleak: closing %s failed: %s", self.path, e)
