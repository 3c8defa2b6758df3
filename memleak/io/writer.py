"""Writing run files: a header, then records appended and written out one by one, so a run
killed mid-way (an OOM, kill -9) loads up to its last whole record. No pickle is ever written,
no file is ever replaced, and an I/O error stops the recording, never the training."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..schema import EVENT, HEADER, SCHEMA_VERSION, STEP
from .codec import EXACT_INT, LAYOUT, MASK_BITS, MISSING, SIG_DIGITS, as_number, n_masks, prepare, round_sig
from .runfiles import create_run_file

if TYPE_CHECKING:  # reading back imports pandas: only when a run is read
    from ..run import Run

log = logging.getLogger("memleak")

#: Records kept in memory after the file could not be written (a bound on memleak's own memory).
MEMORY_RECORDS = 200_000


def _as_numbers(values: dict[str, Any]) -> list[tuple[str, Any]] | None:
    """Every value as a plain int/float/None (NaN and inf as None, rounded where the schema
    says), in the step's order; None when one is no number at all."""
    items: list[tuple[str, Any]] = []
    for k, v in values.items():
        t = type(v)
        if t is float:
            if v - v != 0.0:  # NaN or +-inf
                v = None
            elif k in SIG_DIGITS:
                v = round_sig(v, SIG_DIGITS[k])
        elif t is not int or not -EXACT_INT < v < EXACT_INT:
            if v is not None:
                v = as_number(v)
                if v is MISSING:
                    return None
                if type(v) is float and k in SIG_DIGITS:
                    v = round_sig(v, SIG_DIGITS[k])
        items.append((k, v))
    return items


class RecordSink:
    """Keeps records in memory; the base of RunWriter. `records` is what a Run is built from."""

    def __init__(self) -> None:
        self._records: list[dict] = []
        self._last_step: dict[str, Any] = {}

    @property
    def records(self) -> list[dict]:
        """Every record so far (header, delta-encoded steps, events, ...), as dicts."""
        return self._records

    def header(self, meta: dict[str, Any]) -> None:
        self._emit({"type": HEADER, "schema": SCHEMA_VERSION, **meta})

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values; only those that changed since the last step are written."""
        values = prepare(values)
        delta = {k: v for k, v in values.items() if k == "step" or self._last_step.get(k, MISSING) != v}
        self._last_step.update(values)
        self._emit({"type": STEP, **delta})

    def record(self, type_: str, body: dict[str, Any]) -> None:
        self._emit({"type": type_, **body})

    def event(self, name: str, **body: Any) -> None:
        self.record(EVENT, {"event": name, **body})

    def _emit(self, rec: dict) -> None:
        self._records.append(rec)

    def close(self) -> None:
        pass


class RunWriter(RecordSink):
    """Appends each record to a JSON Lines file, written out at once (unbuffered).

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
        self._closed = False
        self._fh: Any = None
        self._columns: list[str] = []
        self._index: dict[str, int] = {}
        self._floats: set[str] = set()
        self._layout_written = False
        try:
            self.path, self._fh = create_run_file(self.path, overwrite)
            self.has_file = True
        except OSError as e:
            self._stop(e, None)

    @property
    def records(self) -> list[dict]:
        """The file's records, then those kept in memory after writing stopped."""
        if not self.has_file:
            return self._records
        from .reader import decode_lines, split_lines

        records, _, _ = decode_lines(self.path, split_lines(self.path.read_bytes()), errors="skip")
        return records + self._records

    def read(self) -> Run:
        """The run recorded so far: the file, and what memory kept after writing stopped."""
        from .reader import read_run_file, run_from_records

        if self.stopped is None:
            return read_run_file(self.path)
        problem = self.stopped
        if self._dropped:
            problem += f"; the last {self._dropped} records were not kept (memory is bounded)"
        return run_from_records(self.records, path=str(self.path) if self.has_file else None, problems=[problem])

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values, written as a change mask and the values that changed."""
        if self._fh is not None:
            items = _as_numbers(values)
            if items is None:  # a value that is no number: the step goes out as a plain record
                self._plain_step(values)
                return
            try:
                self._grow_layout(items)
                self._put(self._encode(items))
                return
            except OSError as e:
                self._stop(e, values.get("step"))
            self._last_step = {}  # the records kept in memory start with a whole step
        RecordSink.step(self, values)

    def _grow_layout(self, items: list[tuple[str, Any]]) -> None:
        """Add the step's new columns (and ints that became floats) to the layout, and write the
        layout record when it grew (or was never written)."""
        index, floats = self._index, self._floats
        grew = False
        for k, v in items:
            if k not in index:
                index[k] = len(self._columns)
                self._columns.append(k)
                grew = True
            if type(v) is float and k not in floats:
                floats.add(k)
                grew = True
        if grew or not self._layout_written:
            self._layout_written = True
            layout = {"type": LAYOUT, "columns": self._columns, "floats": [c for c in self._columns if c in floats]}
            self._put(json.dumps(layout, separators=(",", ":")))  # raises: step() handles an I/O error

    def _encode(self, items: list[tuple[str, Any]]) -> str:
        """The step array: the change mask(s), then the values that changed, in column order."""
        index, last = self._index, self._last_step
        mask = 0
        changed: list[tuple[int, Any]] = []
        has_step = False
        for k, v in items:
            if k == "step":
                has_step = True
                prev = last.get("step", MISSING)
                if prev is not MISSING and prev is not None and type(v) is type(prev) and v == prev + 1:
                    last["step"] = v
                    continue
            else:
                old = last.get(k, MISSING)
                if old is not MISSING and type(old) is type(v) and old == v:
                    continue
            j = index[k]
            mask |= 1 << j
            changed.append((j, v))
            last[k] = v
        if not has_step and "step" in index:  # absent: it kept its value, which the reader must be told
            j = index["step"]
            mask |= 1 << j
            changed.append((j, last["step"]))
        changed.sort()
        if len(self._columns) <= MASK_BITS:
            head = str(mask)
        else:
            n_words = n_masks(len(self._columns))
            head = ",".join(str(mask >> (MASK_BITS * i) & ((1 << MASK_BITS) - 1)) for i in range(n_words))
        body = ",".join(["null" if v is None else repr(v) for _, v in changed])
        return f"[{head},{body}]" if body else f"[{head}]"

    def _plain_step(self, values: dict[str, Any]) -> None:
        values = {k: v if (n := as_number(v)) is MISSING else n for k, v in prepare(values).items()}
        last = self._last_step
        delta = {k: v for k, v in values.items() if k == "step" or last.get(k, MISSING) != v}
        last.update(values)
        self._emit({"type": STEP, **delta})

    def _emit(self, rec: dict) -> None:
        if self._fh is not None:
            try:
                self._put(json.dumps(rec, separators=(",", ":"), default=str))
                return
            except OSError as e:
                last = self._last_step.get("step")
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
        self._closed = True
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError as e:
                log.warning("memleak: closing %s failed: %s", self.path, e)
