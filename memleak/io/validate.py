"""Checks made once, when a run file is read, so that analysis never meets a value of the
wrong type or out of range: the header's fields, each layout record, and the step values.

Each check names what is wrong in words a person can act on; the reader adds the file and
the line. With ``errors="skip"`` a bad header field is dropped and a bad step value read
as missing, each with a problem recorded on the run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import RunFileError
from ..schema import STEP_COLUMNS
from ..units import INT64_LIMIT as MAX_VALUE  # step values and byte counts fit the int64 step columns
from ..units import fmt_value
from .codec import BadFloats, Layout

#: The most ranks a run may declare: `MultiRun` lists the ranks that are missing.
MAX_WORLD = 1 << 20
#: Problems listed one by one: a file broken on every line gives a short report, not one note a line.
MAX_LISTED = 20
#: What the error of a broken line adds: how to read around it.
SKIP_HINT = "memleak.load(path, errors='skip') or `memleak report --skip-broken` reads around it"

# Header fields later code uses, by what they must hold (documented in docs/run-format.md).
_BYTE_FIELDS = ("budget_bytes", "device_total_bytes", "host_memory_bytes", "parameter_bytes")
_TEXT_FIELDS = ("device", "device_name", "level", "pytorch_cuda_alloc_conf", "model")
_RANK_FIELDS = {"rank": 0, "world_size": 1}  # the lowest value each may take


def parse_line(raw: bytes) -> Any:
    """One line's JSON value; a line nested too deeply for the parser raises ValueError, as any
    other broken line does (json raises RecursionError)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("its values are nested too deeply to be a memleak record") from None


def _is_number(v: Any, low: float, high: float) -> bool:
    """An int or float from `low` up to `high` (NaN compares false, an infinity is past `high`)."""
    return type(v) in (int, float) and low <= v < high


def header_problems(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, what is wrong) for each header field that later code reads and that holds a
    value of the wrong type or out of range; fields the header leaves out are not checked."""
    out = []
    for key in _BYTE_FIELDS:
        v = meta.get(key)
        if v is not None and not _is_number(v, 0, MAX_VALUE):
            out.append((key, f"{key} is {fmt_value(v)}, not a number of bytes from 0 to 2**63"))
    for key, low in _RANK_FIELDS.items():
        v = meta.get(key)
        if v is not None and not (type(v) is int and low <= v < MAX_WORLD):
            out.append((key, f"{key} is {fmt_value(v)}, not an integer from {low} to {MAX_WORLD - 1}"))
    for key in _TEXT_FIELDS:
        v = meta.get(key)
        if v is not None and not isinstance(v, str):
            out.append((key, f"{key} is {fmt_value(v)}, not a string"))
    return out


def fix_header(path: Path, header: dict[str, Any], line: int, errors: str) -> list[str]:
    """Check the header's fields: raise RunFileError naming the first bad one, or (errors="skip")
    drop each bad field from `header` and return a problem for each."""
    problems = []
    for key, what in header_problems(header):
        if errors == "raise":
            raise RunFileError(path, f"line {line}: the header's {what}; {SKIP_HINT}")
        del header[key]
        problems.append(f"line {line}: the header's {what}; the field was ignored")
    return problems


def bad_values(rec: dict[str, Any]) -> list[tuple[str, str]]:
    """(column, what is wrong) for each value of a decoded step record that no step column
    holds: a known column's value that is not a number (a plain step record may carry text
    only in columns of its own), an infinity (written as null, so never by memleak), or an
    integer an int64 cannot hold."""
    out = []
    for k, v in rec.items():
        t = type(v)
        if (t is int and not -MAX_VALUE < v < MAX_VALUE) or (t is float and abs(v) == math.inf):
            out.append((k, f"{k} is {fmt_value(v)}, out of range (step values are finite, integers below 2**63)"))
        elif k in STEP_COLUMNS and v is not None and t is not int and t is not float:
            out.append((k, f"{k} is {fmt_value(v)}, not a number"))
    return out


def fix_step(path: Path, rec: dict[str, Any], line: int, errors: str) -> list[str]:
    """Check a decoded step record's values: raise RunFileError naming the line and the column
    of the first bad one, or (errors="skip") read each as missing, with a problem."""
    problems = []
    for key, what in bad_values(rec):
        if errors == "raise":
            raise RunFileError(path, f"line {line}: {what}; {SKIP_HINT}")
        rec[key] = None
        problems.append(f"line {line}: {what}; read as missing")
    return problems


def capped(problems: list[str]) -> list[str]:
    """The first MAX_LISTED problems, and one line that counts the rest and quotes the last."""
    if len(problems) <= MAX_LISTED:
        return problems
    more = len(problems) - MAX_LISTED
    return [*problems[:MAX_LISTED], f"{more} more problems like these; the last: {problems[-1]}"]


def take_layout(layout: Layout, rec: dict, line: int, errors: str) -> list[str]:
    """Take a layout record. With errors="skip", one whose floats are malformed is taken without
    them (they say only which columns hold floats) and a problem returned; else ValueError."""
    try:
        layout.update(rec)
    except BadFloats as e:
        if errors == "raise":
            raise
        layout.update({**rec, "floats": []})
        return [f"line {line}: {e}; read without them"]
    return []
