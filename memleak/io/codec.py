"""The run-file encoding, shared by the writer and the reader.

A run file is JSON Lines: a header record, then records appended one by one.
Step records are delta-encoded: a value absent from a step record kept its
previous value.

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
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..schema import STEP

RUN_SUFFIX = ".jsonl"
PICKLE_SUFFIXES = (".pickle", ".pkl")
#: The record that names the step columns of the array-encoded step lines that follow it.
LAYOUT = "layout"
#: Columns per mask integer: masks stay exact in a float64 (53-bit mantissa).
MASK_BITS = 52
EXACT_INT = 1 << 53
SIG_DIGITS = {"time": 7, "duration": 4}


def clean_value(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def round_sig(x: Any, digits: int) -> Any:
    """Round a float to `digits` significant digits (relative rounding); others unchanged."""
    if not isinstance(x, float) or x == 0.0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def prepare(values: dict[str, Any]) -> dict[str, Any]:
    out = {k: clean_value(v) for k, v in values.items()}
    for k, digits in SIG_DIGITS.items():
        if k in out:
            out[k] = round_sig(out[k], digits)
    return out


MISSING = object()


def as_number(v: Any) -> Any:
    """v as a plain int/float/None for the array encoding, or MISSING when it cannot be one."""
    t = type(v)
    if v is None or t is float:
        return v
    if t is int:
        return v if -EXACT_INT < v < EXACT_INT else MISSING
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return MISSING
    if isinstance(v, numbers.Integral):
        return as_number(int(v))
    f = float(v)
    return f if math.isfinite(f) else None


def n_masks(n_columns: int) -> int:
    """How many mask integers a step array of this many columns starts with."""
    return max(1, -(-n_columns // MASK_BITS))


class BadFloats(ValueError):
    """A layout record whose `floats` is not a list of column names (its columns are sound)."""


def layout_columns(rec: dict, previous: list[str]) -> tuple[list[str], set[str]]:
    """The step columns a layout record names and those of them that hold floats; ValueError
    unless it extends the `previous` columns with distinct names and lists its floats by name."""
    cols, floats = rec.get("columns"), rec.get("floats") or []
    if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols) or cols[: len(previous)] != previous:
        raise ValueError("a layout record must list the step columns, extending the previous layout")
    if len(set(cols)) != len(cols) or "type" in cols:
        raise ValueError("a layout record must name each step column once, and none 'type'")
    if not isinstance(floats, list) or not all(isinstance(c, str) for c in floats):
        raise BadFloats(f"a layout record's floats must be a list of column names, not {type(floats).__name__}")
    return list(cols), set(floats)


class Layout:
    """The step columns in force while reading, and the decoding of one step array."""

    def __init__(self) -> None:
        self.columns: list[str] = []
        self.floats: set[str] = set()
        self.seen = False

    def update(self, rec: dict) -> None:
        self.columns, self.floats = layout_columns(rec, self.columns)
        self.seen = True

    def decode(self, arr: list, last: dict[str, Any]) -> dict:
        """A long-form step record from one array line."""
        if not self.seen:
            raise ValueError("a step array before any layout record")
        k = n_masks(len(self.columns))
        masks = arr[:k]
        if len(masks) != k or not all(type(m) is int and 0 <= m < (1 << MASK_BITS) for m in masks):
            raise ValueError("a step array must start with its change mask")
        values = arr[k:]
        rec: dict[str, Any] = {"type": STEP}
        i = 0
        for j, name in enumerate(self.columns):
            if masks[j // MASK_BITS] >> (j % MASK_BITS) & 1:
                if i >= len(values):
                    raise ValueError("fewer values than the change mask announces")
                v = values[i]
                i += 1
                if v is not None and type(v) not in (int, float):
                    raise ValueError(f"{name} is not a number")
                rec[name] = v
            elif name == "step" and isinstance(last.get("step"), (int, float)):
                rec["step"] = last["step"] + 1
        if i != len(values) or any(
            m >> (len(self.columns) - k * MASK_BITS)
            for k, m in enumerate(masks)
            if len(self.columns) - k * MASK_BITS < MASK_BITS
        ):
            raise ValueError("more values than the change mask announces")
        return rec
