"""Writing run files: a header, then records appended and flushed one by one, so a run
killed mid-way (an OOM, kill -9) loads up to its last whole record. No pickle is ever written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from ..schema import EVENT, HEADER, SCHEMA_VERSION, STEP
from .codec import EXACT_INT, LAYOUT, MASK_BITS, MISSING, SIG_DIGITS, as_number, n_masks, prepare, round_sig
from .reader import decode_lines, split_lines


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
    """Appends each record to a JSON Lines file and flushes it at once.

    It keeps no records in memory (a long run would grow): `records` reads
    them back from the file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(self.path, "w", encoding="utf-8")
        self._columns: list[str] = []
        self._index: dict[str, int] = {}
        self._floats: set[str] = set()
        self._layout_written = False

    @property
    def records(self) -> list[dict]:
        if self._fh is not None:
            self._fh.flush()
        records, _, _ = decode_lines(self.path, split_lines(self.path.read_bytes()), errors="skip")
        return records

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values, written as a change mask and the values that changed."""
        items = _as_numbers(values)
        if items is None:  # a value that is no number: the step goes out as a plain record
            self._plain_step(values)
            return
        self._grow_layout(items)
        self._write(self._encode(items))

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
            self._emit(
                {"type": LAYOUT, "columns": list(self._columns), "floats": [c for c in self._columns if c in floats]}
            )

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
        self._write(json.dumps(rec, separators=(",", ":"), default=str))

    def _write(self, line: str) -> None:
        if self._fh is None:
            return
        self._fh.write(line + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
