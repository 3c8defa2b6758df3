"""Writing and reading run files (JSON Lines), and `load` for any input memleak reads.

A run file is plain text: a header record, then records appended and flushed
one by one, so a run killed mid-way (an OOM, kill -9) loads up to its last
whole record. Step records are delta-encoded: a value absent from a step
record kept its previous value. No pickle is ever written.

On-disk encoding of steps (compact, and fast to read in bulk):

- a ``{"type": "layout", "columns": [...], "floats": [...]}`` record names the
  step columns, in order; a new one is written whenever a column appears (the
  list only grows) or an integer column first takes a float value;
- each step is then one JSON array ``[mask, v1, v2, ...]``: bit ``j`` of
  ``mask`` says that column ``j`` changed and its new value follows, in column
  order; ``null`` is a missing value. A layout of more than 52 columns uses
  ``ceil(C / 52)`` masks, lowest columns first. The ``step`` column, when its
  bit is clear, is the previous step plus one;
- ``time`` is rounded to 7 significant digits and ``duration`` to 4;
- a step with a value that is not a number (a string, a bool) is written as a
  plain ``{"type": "step", ...}`` record of the columns that changed.

The reader parses every array line in one pass of pandas' C parser and
rebuilds the columns with numpy; anything unusual (a broken line, a plain step
record) goes through a line-by-line reader that names the broken line.
"""
from __future__ import annotations

import io
import json
import math
import numbers
import os
from pathlib import Path
from typing import IO, Any, Iterable

import numpy as np
import pandas as pd

from .errors import RunFileError, UsageError
from .run import Run
from .schema import EVENT, HEADER, SCHEMA_VERSION, STEP

RUN_SUFFIX = ".jsonl"
PICKLE_SUFFIXES = (".pickle", ".pkl")
#: The record that names the step columns of the array-encoded step lines that follow it.
LAYOUT = "layout"
#: Columns per mask integer: masks stay exact in a float64 (53-bit mantissa).
MASK_BITS = 52
_EXACT_INT = 1 << 53
_SIG_DIGITS = {"time": 7, "duration": 4}


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _round_sig(x: Any, digits: int) -> Any:
    """Round a float to `digits` significant digits (relative rounding); others unchanged."""
    if not isinstance(x, float) or x == 0.0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def _prepare(values: dict[str, Any]) -> dict[str, Any]:
    out = {k: _clean(v) for k, v in values.items()}
    for k, digits in _SIG_DIGITS.items():
        if k in out:
            out[k] = _round_sig(out[k], digits)
    return out


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
        values = _prepare(values)
        delta = {k: v for k, v in values.items() if k == "step" or self._last_step.get(k, _MISSING) != v}
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


_MISSING = object()


def _as_number(v: Any) -> Any:
    """v as a plain int/float/None for the array encoding, or _MISSING when it cannot be one."""
    t = type(v)
    if v is None or t is float:
        return v
    if t is int:
        return v if -_EXACT_INT < v < _EXACT_INT else _MISSING
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return _MISSING
    if isinstance(v, numbers.Integral):
        return _as_number(int(v))
    f = float(v)
    return f if math.isfinite(f) else None


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
        records, _, _ = _decode_lines(self.path, _split_lines(self.path.read_bytes()), errors="skip")
        return records

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values, written as a change mask and the values that changed."""
        # 1. every value as a plain int/float/None (else the step goes out as a plain record)
        items: list[tuple[str, Any]] = []
        for k, v in values.items():
            t = type(v)
            if t is float:
                if v - v != 0.0:  # NaN or +-inf
                    v = None
                elif k in _SIG_DIGITS:
                    v = _round_sig(v, _SIG_DIGITS[k])
            elif t is not int or not -_EXACT_INT < v < _EXACT_INT:
                if v is not None:
                    v = _as_number(v)
                    if v is _MISSING:
                        self._plain_step(values)
                        return
                    if type(v) is float and k in _SIG_DIGITS:
                        v = _round_sig(v, _SIG_DIGITS[k])
            items.append((k, v))
        # 2. the layout grows with new columns (and ints that become floats)
        index, floats, last = self._index, self._floats, self._last_step
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
            self._emit({"type": LAYOUT, "columns": list(self._columns),
                        "floats": [c for c in self._columns if c in floats]})
        # 3. the mask and the values that changed, in column order
        mask = 0
        changed: list[tuple[int, Any]] = []
        has_step = False
        for k, v in items:
            if k == "step":
                has_step = True
                prev = last.get("step", _MISSING)
                if prev is not _MISSING and prev is not None and type(v) is type(prev) and v == prev + 1:
                    last["step"] = v
                    continue
            else:
                old = last.get(k, _MISSING)
                if old is not _MISSING and type(old) is type(v) and old == v:
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
            n_masks = _n_masks(len(self._columns))
            head = ",".join(str(mask >> (MASK_BITS * i) & ((1 << MASK_BITS) - 1)) for i in range(n_masks))
        body = ",".join(["null" if v is None else repr(v) for _, v in changed])
        self._write(f"[{head},{body}]" if body else f"[{head}]")

    def _plain_step(self, values: dict[str, Any]) -> None:
        values = {k: v if (n := _as_number(v)) is _MISSING else n for k, v in _prepare(values).items()}
        last = self._last_step
        delta = {k: v for k, v in values.items() if k == "step" or last.get(k, _MISSING) != v}
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


# ---------------------------------------------------------------- reading

def run_from_records(records: Iterable[dict], path: str | None = None, truncated: bool = False,
                     problems: list[str] | None = None) -> Run:
    """Build a Run from records (as written by a RecordSink). Used for files and live runs alike."""
    meta: dict[str, Any] | None = None
    rows: list[dict] = []
    events: list[dict] = []
    others: dict[str, list[dict]] = {}
    last: dict[str, Any] = {}
    for rec in records:
        kind = rec.get("type")
        body = {k: v for k, v in rec.items() if k != "type"}
        if kind == HEADER:
            meta = body
        elif kind == STEP:
            last = {**last, **body}
            rows.append(last)
        elif kind == EVENT:
            events.append(body)
        elif kind == LAYOUT:
            continue
        else:
            others.setdefault(str(kind), []).append(body)
    if meta is None:
        raise RunFileError(path, "no header record: this is not a memleak run file")
    steps = pd.DataFrame(rows)
    if steps.empty:
        steps = _empty_steps()
    return Run(meta, steps, events, others, path=path, truncated=truncated, problems=problems)


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "time": pd.Series(dtype="float64")})


def _split_lines(data: bytes) -> tuple[list[bytes], bool]:
    lines = data.split(b"\n")
    ends_cleanly = lines[-1] == b""
    if ends_cleanly:
        lines.pop()
    return lines, ends_cleanly


def _n_masks(n_columns: int) -> int:
    return max(1, -(-n_columns // MASK_BITS))


class _Layout:
    def __init__(self) -> None:
        self.columns: list[str] = []
        self.floats: set[str] = set()
        self.seen = False

    def update(self, rec: dict) -> None:
        cols = rec.get("columns")
        if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols) or cols[:len(self.columns)] != self.columns:
            raise ValueError("a layout record must list the step columns, extending the previous layout")
        self.columns = list(cols)
        self.floats = set(rec.get("floats") or ())
        self.seen = True

    def decode(self, arr: list, last: dict[str, Any]) -> dict:
        """A long-form step record from one array line."""
        if not self.seen:
            raise ValueError("a step array before any layout record")
        n_masks = _n_masks(len(self.columns))
        masks = arr[:n_masks]
        if len(masks) != n_masks or not all(type(m) is int and 0 <= m < (1 << MASK_BITS) for m in masks):
            raise ValueError("a step array must start with its change mask")
        values = arr[n_masks:]
        rec: dict[str, Any] = {"type": STEP}
        i = 0
        for j, name in enumerate(self.columns):
            if masks[j // MASK_BITS] >> (j % MASK_BITS) & 1:
                if i >= len(values):
                    raise ValueError("fewer values than the change mask announces")
                v = values[i]
                i += 1
                if v is not None and not (type(v) in (int, float)):
                    raise ValueError(f"{name} is not a number")
                rec[name] = v
            elif name == "step" and isinstance(last.get("step"), (int, float)):
                rec["step"] = last["step"] + 1
        if i != len(values) or any(m >> (len(self.columns) - k * MASK_BITS) for k, m in enumerate(masks)
                                   if len(self.columns) - k * MASK_BITS < MASK_BITS):
            raise ValueError("more values than the change mask announces")
        return rec


def _decode_lines(path: Path, split: tuple[list[bytes], bool], errors: str) -> tuple[list[dict], bool, list[str]]:
    """Line by line: long-form records, whether the file was cut short, and problems."""
    lines, ends_cleanly = split
    records: list[dict] = []
    problems: list[str] = []
    truncated = False
    layout = _Layout()
    last: dict[str, Any] = {}
    seen_header = False
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            if isinstance(rec, list):
                if not seen_header:
                    raise ValueError("not a JSON object")
                rec = layout.decode(rec, last)
            elif not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            elif rec.get("type") == LAYOUT and seen_header:
                layout.update(rec)
                continue
        except (ValueError, UnicodeDecodeError) as e:
            if n == len(lines) and not ends_cleanly and records:
                truncated = True
                problems.append(f"the file was cut short: line {n} is incomplete; "
                                f"the {len(records)} whole records before it were read")
                break
            if n == 1:
                raise RunFileError(path, "this is not a memleak run file (the first line is not a JSON record)") from None
            msg = f"line {n} is not a valid record ({e})"
            if errors == "raise":
                raise RunFileError(path, msg + "; memleak.load(path, errors='skip') reads around it") from None
            problems.append(msg + "; skipped")
            continue
        if not seen_header:
            _check_header(path, rec)
            seen_header = True
        if rec.get("type") == STEP:
            last.update(rec)
        records.append(rec)
    return records, truncated, problems


def _read_fast(path: Path, data: bytes) -> Run | None:
    """Bulk reader for a well-formed file of array-encoded steps; None sends the file to the
    line-by-line reader (which also explains what is wrong)."""
    truncated = False
    problems: list[str] = []
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            return None
        try:
            json.loads(data[cut:])
            data = data + b"\n"
        except ValueError:
            data = data[:cut]
            whole = data.count(b"\n")
            problems.append(f"the file was cut short: line {whole + 1} is incomplete; "
                            f"the {whole} whole records before it were read")
            truncated = True
    if not data.startswith(b"{"):
        return None
    n_lines = data.count(b"\n")
    # the object lines: header, layouts, events, other records
    meta: dict[str, Any] | None = None
    events: list[dict] = []
    others: dict[str, list[dict]] = {}
    layouts: list[tuple[int, list[str], set[str]]] = []  # (first array row, columns, floats)
    pos, rows_before, n_obj = 0, 0, 0
    obj_chars = {b"[": 0, b"]": 0, b",": 0}  # these characters in object lines (checked below)
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end]
        n_obj += 1
        for c in obj_chars:
            obj_chars[c] += line.count(c)
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        if not isinstance(rec, dict):
            return None
        kind = rec.get("type")
        if meta is None:
            if kind != HEADER or rec.get("schema") != SCHEMA_VERSION:
                return None
            meta = {k: v for k, v in rec.items() if k != "type"}
        elif kind == LAYOUT:
            cols = rec.get("columns")
            prev = layouts[-1][1] if layouts else []
            if not isinstance(cols, list) or cols[:len(prev)] != prev or len(set(cols)) != len(cols):
                return None
            layouts.append((rows_before, list(cols), set(rec.get("floats") or ())))
        elif kind == STEP or kind == HEADER:
            return None
        elif kind == EVENT:
            events.append({k: v for k, v in rec.items() if k != "type"})
        else:
            others.setdefault(str(kind), []).append({k: v for k, v in rec.items() if k != "type"})
        nxt = data.find(b"\n{", end)
        if nxt < 0:
            rows_before += data.count(b"\n", end + 1)
            break
        rows_before += data.count(b"\n", end + 1, nxt + 1)
        pos = nxt + 1
    if meta is None:
        return None
    # Every other line is a step array: one "[" and one "]" each, and as many commas as
    # its fields less one (checked against the masks once they are decoded).
    n_arr = n_lines - n_obj
    if data.count(b"[") - obj_chars[b"["] != n_arr or data.count(b"]") - obj_chars[b"]"] != n_arr:
        return None
    if n_arr == 0:
        steps = _empty_steps()
    else:
        if not layouts or layouts[0][0] != 0:
            return None
        steps = _decode_arrays(data, n_arr, layouts, data.count(b",") - obj_chars[b","])
        if steps is None:
            return None
        if steps.empty:
            steps = _empty_steps()
    return Run(meta, steps, events, others, path=str(path), truncated=truncated, problems=problems)


def _decode_arrays(data: bytes, n: int, layouts: list[tuple[int, list[str], set[str]]],
                   commas: int) -> pd.DataFrame | None:
    columns, floats = layouts[-1][1], layouts[-1][2]
    c_row = np.empty(n, dtype=np.int64)
    for i, (start, cols, _) in enumerate(layouts):
        stop = layouts[i + 1][0] if i + 1 < len(layouts) else n
        c_row[start:stop] = len(cols)
    k_row = np.maximum(1, -(-c_row // MASK_BITS))
    width = int((k_row + c_row).max())
    try:
        table = pd.read_csv(io.BytesIO(data.translate(None, b"[]")), header=None, names=range(width),
                            comment="{", dtype=np.float64, na_values=["null", ""], keep_default_na=False,
                            skip_blank_lines=True, engine="c", index_col=False, low_memory=False)
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if table.shape != (n, width):
        return None
    # fields by row: a[f, i] is field f of row i (stacking columns is a plain copy)
    a = np.stack([table[c].to_numpy(dtype=np.float64) for c in table.columns])
    del table
    rows = np.arange(n)
    k_max = int(k_row.max())
    masks = np.zeros((n, k_max), dtype=np.int64)
    for k in range(k_max):
        has = k_row > k
        m = a[k, has]
        if np.isnan(m).any() or (m < 0).any() or (m >= 2.0 ** MASK_BITS).any() or (m != np.floor(m)).any():
            return None
        masks[has, k] = m.astype(np.int64)
        room = np.clip(c_row[has] - k * MASK_BITS, 0, MASK_BITS)  # bits above the layout must be clear
        if ((masks[has, k] >> room) != 0).any():
            return None
    rank = k_row.copy()  # next value's field in each row
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(columns):
        bit = ((masks[:, j // MASK_BITS] >> (j % MASK_BITS)) & 1).astype(bool)
        set_rows = rows[bit]
        vals = a[rank[set_rows], set_rows]
        rank += bit
        if name == "step":
            vals = vals - set_rows  # an unset step is the previous one plus one
        if len(set_rows) == n:  # changed at every step: nothing to carry forward
            col = vals
        else:
            col = np.full(n, np.nan)
            col[set_rows] = vals
            idx = np.where(bit, rows, -1)
            np.maximum.accumulate(idx, out=idx)
            col = col[idx] if bit[0] else np.where(idx >= 0, col[idx], np.nan)
        if name == "step":
            col = col + rows
        if name not in floats and not np.isnan(col).any():
            col = col.astype(np.int64)
        out[name] = col
    # every row holds exactly its masks and the values they announce: nothing after them,
    # and (nulls and empty fields both read as NaN) one comma less than its fields
    for f in range(1, width):
        if not np.isnan(a[f, rank <= f]).all():
            return None
    if int(rank.sum()) - n != commas:
        return None
    return pd.DataFrame(out, copy=False)


def read_run_file(path: str | os.PathLike, errors: str = "raise") -> Run:
    """Read one run file. A last line cut short (the process was killed) is dropped and
    flagged as `run.truncated`; a broken line elsewhere raises, unless errors="skip"."""
    if errors not in ("raise", "skip"):
        raise UsageError(f"errors must be 'raise' or 'skip', not {errors!r}")
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RunFileError(path, f"cannot read the file: {e.strerror or e}") from None
    if not data[:4096].strip() and not data.strip():
        raise RunFileError(path, "the file is empty: no run was recorded in it")
    run = _read_fast(path, data)
    if run is not None:
        return run
    records, truncated, problems = _decode_lines(path, _split_lines(data), errors)
    return run_from_records(records, path=str(path), truncated=truncated, problems=problems)


def _check_header(path: Path, rec: dict) -> None:
    if rec.get("type") != HEADER:
        raise RunFileError(path, "the first record is not a memleak header: this is not a memleak run file")
    version = rec.get("schema")
    if version != SCHEMA_VERSION:
        raise RunFileError(path, f"schema version {version!r} is not supported: this memleak reads version "
                                 f"{SCHEMA_VERSION}; use the memleak version that wrote the file")


def find_run_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(f"*{RUN_SUFFIX}") if p.is_file())


def is_pickle(path: Path) -> bool:
    if path.suffix.lower() in PICKLE_SUFFIXES:
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(1) == b"\x80"  # pickle protocol 2+ opcode
    except OSError:
        return False


def load(path: str | os.PathLike, errors: str = "raise"):
    """Open a recorded run (a run file, or a folder holding one) or a PyTorch memory snapshot pickle.

    Returns a `Run`, or a `Snapshot` for a pickle written by
    ``torch.cuda.memory._dump_snapshot``. A folder with one run file per rank
    is merged into a multi-rank run.
    """
    p = Path(path)
    if not p.exists():
        raise RunFileError(p, "no such file or folder")
    if p.is_dir():
        files = find_run_files(p)
        if not files:
            raise RunFileError(p, f"the folder holds no run file (*{RUN_SUFFIX}); pass the out= folder of a tracked run")
        if len(files) == 1:
            return read_run_file(files[0], errors=errors)
        from .distributed import load_ranks  # a folder of per-rank files
        return load_ranks(files, errors=errors)
    if is_pickle(p):
        from .snapshot import load_snapshot
        return load_snapshot(p)
    return read_run_file(p, errors=errors)
