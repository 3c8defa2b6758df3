"""Reading run files: a bulk reader for well-formed files (one pass of pandas' C parser over
every step array, columns rebuilt with numpy), and a line-by-line reader for anything
unusual, which names the broken line. A last line cut short is dropped and flagged."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import RunFileError, UsageError
from ..run import Run
from ..schema import EVENT, HEADER, SCHEMA_VERSION, STEP
from .codec import LAYOUT, MASK_BITS, Layout, layout_columns
from .runfiles import second_writer
from .validate import MAX_VALUE, SKIP_HINT, capped, fix_header, fix_step, parse_line, take_layout


def run_from_records(
    records: Iterable[dict], path: str | None = None, truncated: bool = False, problems: list[str] | None = None
) -> Run:
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


def split_lines(data: bytes) -> tuple[list[bytes], bool]:
    lines = data.split(b"\n")
    ends_cleanly = lines[-1] == b""
    if ends_cleanly:
        lines.pop()
    return lines, ends_cleanly


def decode_lines(path: Path, split: tuple[list[bytes], bool], errors: str) -> tuple[list[dict], bool, list[str]]:
    """Line by line: long-form records, whether the file was cut short, and problems."""
    lines, ends_cleanly = split
    records: list[dict] = []
    problems: list[str] = []
    truncated = False
    layout = Layout()
    last: dict[str, Any] = {}
    seen_header = False
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            rec = parse_line(raw)
            if isinstance(rec, list):
                if not seen_header:
                    raise ValueError("not a JSON object")
                rec = layout.decode(rec, last)
            elif not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            elif rec.get("type") == LAYOUT and seen_header:
                problems += take_layout(layout, rec, n, errors)
                continue
        except (ValueError, UnicodeDecodeError) as e:
            if n == len(lines) and not ends_cleanly and records:
                truncated = True
                problems.append(
                    f"the file was cut short: line {n} is incomplete; "
                    f"the {len(records)} whole records before it were read"
                )
                break
            if n == 1:
                raise RunFileError(
                    path, "this is not a memleak run file (the first line is not a JSON record)"
                ) from None
            msg = f"line {n} is not a valid record ({e})"
            if errors == "raise":
                raise RunFileError(path, f"{msg}; {SKIP_HINT}") from None
            problems.append(msg + "; skipped")
            continue
        if not seen_header:
            _check_header(path, rec)
            problems += fix_header(path, rec, n, errors)
            seen_header = True
        elif (mixed := second_writer(n, rec, last)) is not None:
            if errors == "raise":
                raise RunFileError(path, mixed + "; memleak.load(path, errors='skip') reads the records before it")
            problems.append(f"{path.name}: {mixed}; the {len(records)} records before it were read")
            break
        if rec.get("type") == STEP:
            problems += fix_step(path, rec, n, errors)
            last.update(rec)
        records.append(rec)
    return records, truncated, capped(problems)


def read_fast(path: Path, data: bytes, errors: str = "raise") -> Run | None:
    """Bulk reader for a well-formed file of array-encoded steps; None sends the file to the
    line-by-line reader (which also explains what is wrong)."""
    whole = _whole_lines(data)
    if whole is None:
        return None
    data, truncated, problems = whole
    if not data.startswith(b"{"):
        return None
    objects = _scan_objects(data)
    if objects is None or objects.meta is None:
        return None
    problems += fix_header(path, objects.meta, 1, errors)
    steps = _step_table(data, objects)
    if steps is None:
        return None
    return Run(
        objects.meta, steps, objects.events, objects.others, path=str(path), truncated=truncated, problems=problems
    )


def _whole_lines(data: bytes) -> tuple[bytes, bool, list[str]] | None:
    """The file's whole lines (a last line cut short dropped, a complete one without its
    newline kept), whether it was cut short, and the problem that says so; None for a file
    without one whole line."""
    if data.endswith(b"\n"):
        return data, False, []
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return None
    try:
        parse_line(data[cut:])
    except ValueError:
        whole = data[:cut].count(b"\n")
        return (
            data[:cut],
            True,
            [f"the file was cut short: line {whole + 1} is incomplete; the {whole} whole records before it were read"],
        )
    return data + b"\n", False, []


@dataclass
class _Objects:
    """What the object lines (header, layouts, events, other records) of a run file hold."""

    meta: dict[str, Any] | None = None
    events: list[dict] = field(default_factory=list)
    others: dict[str, list[dict]] = field(default_factory=dict)
    layouts: list[tuple[int, list[str], set[str]]] = field(default_factory=list)  # (first array row, columns, floats)
    lines: int = 0
    chars: dict[bytes, int] = field(default_factory=lambda: {b"[": 0, b"]": 0, b",": 0})  # in object lines

    def add(self, rec: dict, rows_before: int) -> bool:
        """Take one object record, `rows_before` step arrays into the file; False when the bulk
        reader cannot read the file (no header first, a layout that drops columns, a step object)."""
        kind = rec.get("type")
        if self.meta is None:
            if kind != HEADER or rec.get("schema") != SCHEMA_VERSION:
                return False
            self.meta = {k: v for k, v in rec.items() if k != "type"}
        elif kind == LAYOUT:
            try:
                cols, floats = layout_columns(rec, self.layouts[-1][1] if self.layouts else [])
            except ValueError:
                return False
            self.layouts.append((rows_before, cols, floats))
        elif kind == STEP or kind == HEADER:
            return False
        elif kind == EVENT:
            self.events.append({k: v for k, v in rec.items() if k != "type"})
        else:
            self.others.setdefault(str(kind), []).append({k: v for k, v in rec.items() if k != "type"})
        return True


def _scan_objects(data: bytes) -> _Objects | None:
    """Every object line, jumping from one to the next over the step arrays between them
    (counted, so that each layout knows its first array row); None when one is no record."""
    objects = _Objects()
    pos, rows_before = 0, 0
    chars = objects.chars
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end]
        objects.lines += 1
        for c in chars:
            chars[c] += line.count(c)
        try:
            rec = parse_line(line)
        except ValueError:
            return None
        if not isinstance(rec, dict) or not objects.add(rec, rows_before):
            return None
        nxt = data.find(b"\n{", end)
        if nxt < 0:
            break
        rows_before += data.count(b"\n", end + 1, nxt + 1)
        pos = nxt + 1
    return objects


def _step_table(data: bytes, objects: _Objects) -> pd.DataFrame | None:
    """The steps from every line that is not an object line; None unless each is one step array."""
    # Every other line is a step array: one "[" and one "]" each, and as many commas as
    # its fields less one (checked against the masks once they are decoded).
    chars = objects.chars
    n_arr = data.count(b"\n") - objects.lines
    if data.count(b"[") - chars[b"["] != n_arr or data.count(b"]") - chars[b"]"] != n_arr:
        return None
    if n_arr == 0:
        return _empty_steps()
    if not objects.layouts or objects.layouts[0][0] != 0:
        return None
    steps = _decode_arrays(data, n_arr, objects.layouts, data.count(b",") - chars[b","])
    if steps is None:
        return None
    return _empty_steps() if steps.empty else steps


def _decode_arrays(
    data: bytes, n: int, layouts: list[tuple[int, list[str], set[str]]], commas: int
) -> pd.DataFrame | None:
    """The `n` step arrays as columns (None when one does not match its masks and layout)."""
    c_row = np.empty(n, dtype=np.int64)  # columns in each row's layout
    for i, (start, cols, _) in enumerate(layouts):
        stop = layouts[i + 1][0] if i + 1 < len(layouts) else n
        c_row[start:stop] = len(cols)
    k_row = np.maximum(1, -(-c_row // MASK_BITS))  # mask fields in each row
    width = int((k_row + c_row).max())
    a = _read_fields(data, n, width)
    if a is None:
        return None
    masks = _read_masks(a, c_row, k_row)
    if masks is None:
        return None
    filled = _fill_columns(a, masks, k_row, layouts[-1][1], layouts[-1][2])
    if filled is None:
        return None
    out, rank = filled
    # every row holds exactly its masks and the values they announce: nothing after them,
    # and (nulls and empty fields both read as NaN) one comma less than its fields
    for f in range(1, width):
        if not np.isnan(a[f, rank <= f]).all():
            return None
    if int(rank.sum()) - n != commas:
        return None
    return pd.DataFrame(out, copy=False)


def _read_fields(data: bytes, n: int, width: int) -> np.ndarray | None:
    """Every step array's fields in one pass of pandas' C parser (object lines skipped as
    comments): a[f, i] is field f of row i, NaN where absent. None unless n rows come back."""
    try:
        table = pd.read_csv(
            io.BytesIO(data.translate(None, b"[]")),
            header=None,
            names=range(width),
            comment="{",
            dtype=np.float64,
            na_values=["null", ""],
            keep_default_na=False,
            skip_blank_lines=True,
            engine="c",
            index_col=False,
            low_memory=False,
        )
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if table.shape != (n, width):
        return None
    # fields by row (stacking columns is a plain copy)
    return np.stack([table[c].to_numpy(dtype=np.float64) for c in table.columns])


def _read_masks(a: np.ndarray, c_row: np.ndarray, k_row: np.ndarray) -> np.ndarray | None:
    """Each row's change masks as ints (row, word); None unless every one is a whole number
    within its word with no bit set beyond its row's layout."""
    n = len(c_row)
    k_max = int(k_row.max())
    masks = np.zeros((n, k_max), dtype=np.int64)
    for k in range(k_max):
        has = k_row > k
        m = a[k, has]
        if np.isnan(m).any() or (m < 0).any() or (m >= 2.0**MASK_BITS).any() or (m != np.floor(m)).any():
            return None
        masks[has, k] = m.astype(np.int64)
        room = np.clip(c_row[has] - k * MASK_BITS, 0, MASK_BITS)  # bits above the layout must be clear
        if ((masks[has, k] >> room) != 0).any():
            return None
    return masks


def _fill_columns(
    a: np.ndarray, masks: np.ndarray, k_row: np.ndarray, columns: list[str], floats: set[str]
) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """Each column from the values its mask bit announces, carried forward over the steps that
    left it unchanged; and, per row, the field after its last value. None when a value is out
    of range."""
    n = len(k_row)
    rows = np.arange(n)
    rank = k_row.copy()  # next value's field in each row
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(columns):
        bit = ((masks[:, j // MASK_BITS] >> (j % MASK_BITS)) & 1).astype(bool)
        set_rows = rows[bit]
        vals = a[rank[set_rows], set_rows]
        # an infinity, or an integer an int64 cannot hold (2**63+7 would wrap when cast): the
        # line-by-line reader names its line and column
        if (np.abs(vals) >= (np.inf if name in floats else MAX_VALUE)).any():
            return None
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
    return out, rank


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
    run = read_fast(path, data, errors)
    if run is not None and steps_in_order(run.steps):
        return run
    records, truncated, problems = decode_lines(path, split_lines(data), errors)
    return run_from_records(records, path=str(path), truncated=truncated, problems=problems)


def _check_header(path: Path, rec: dict) -> None:
    if rec.get("type") != HEADER:
        raise RunFileError(path, "the first record is not a memleak header: this is not a memleak run file")
    version = rec.get("schema")
    if version != SCHEMA_VERSION:
        raise RunFileError(
            path,
            f"schema version {version!r} is not supported: this memleak reads version "
            f"{SCHEMA_VERSION}; use the memleak version that wrote the file",
        )


def steps_in_order(steps: pd.DataFrame) -> bool:
    """Whether no step number goes back (else the line-by-line reader says where two writers mixed)."""
    if "step" not in steps or len(steps) < 2:
        return True
    return not bool((np.diff(steps["step"].to_numpy(dtype=np.float64)) < 0).any())
