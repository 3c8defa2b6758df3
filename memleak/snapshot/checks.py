"""The value checks of a snapshot's fields, made on each table column as it is built: sizes,
addresses and counts are integers from 0 to 2**63-1 and a size column's total fits an int64
too, so that no later sum, format or comparison meets a value out of range (a 2**70-byte
segment would load, then fail in the report). Each error names the field and the value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..units import INT64_LIMIT as MAX_VALUE  # sizes, addresses and counts fit the int64 tables
from ..units import fmt_value
from .layout import NotASnapshot

_NONE = type(None)


def int_column(
    values: Sequence[Any], field: str, *, nullable: bool = False, signed: bool = False, summed: bool = False
) -> Any:
    """`values` (ints, or None where `nullable`) as an int64 array, or a nullable Int64 one when
    some are None. NotASnapshot naming `field` ("a block's size") for a value that is not an
    int, one out of range (below 0 unless `signed`, or 2**63 and up), or (`summed`) a total of
    2**63 and up."""
    kinds = set(map(type, values))
    allowed = {int, _NONE} if nullable else {int}
    if not kinds <= allowed:
        bad = next(v for v in values if type(v) not in allowed)
        raise NotASnapshot(f"{field} has the wrong type: {fmt_value(bad)}, not an integer")
    present = [v for v in values if v is not None] if _NONE in kinds else values
    low = -MAX_VALUE if signed else 0
    if present:
        lo, hi = min(present), max(present)
        if lo < low or hi >= MAX_VALUE:
            bad = lo if lo < low else hi
            low_text = "-2**63" if signed else "0"
            raise NotASnapshot(f"{field} is out of range: {fmt_value(bad)}, not an integer from {low_text} to 2**63-1")
        if summed and sum(present) >= MAX_VALUE:
            raise NotASnapshot(f"the values of {field} add up to 2**63 or more, more memory than any machine has")
    if _NONE in kinds:
        return pd.array(values, dtype="Int64")
    return np.array(values, dtype=np.int64)


def text_column(values: Sequence[Any], field: str, *, nullable: bool = False) -> pd.Categorical:
    """`values` (strings, or None where `nullable`) as a Categorical; NotASnapshot naming
    `field` for any other value."""
    allowed = {str, _NONE} if nullable else {str}
    if not set(map(type, values)) <= allowed:
        bad = next(v for v in values if type(v) not in allowed)
        raise NotASnapshot(f"{field} has the wrong type: {fmt_value(bad)}, not a string")
    return pd.Categorical(values)


def check_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The allocator settings, checked for the keys `Snapshot.alloc_conf` reads."""
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf is not None and not isinstance(conf, str):
        raise NotASnapshot(f"allocator_settings PYTORCH_CUDA_ALLOC_CONF is {fmt_value(conf)}, not a string")
    split = settings.get("max_split_size")
    if split is not None and type(split) is not int:  # SIZE_MAX (2**64-1) or -1 means no limit
        raise NotASnapshot(f"allocator_settings max_split_size is {fmt_value(split)}, not a size in bytes")
    gc = settings.get("garbage_collection_threshold")
    if gc is not None and not (type(gc) in (int, float) and math.isfinite(gc)):
        raise NotASnapshot(f"allocator_settings garbage_collection_threshold is {fmt_value(gc)}, not a number")
    return settings
