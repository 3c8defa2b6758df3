"""A run's step records as run-file lines: the array encoding of `codec.py` (a layout record
whenever the columns grow, then one change-masked array a step), or a plain step record for a
step with a value that is no number. Pure: what the lines are, not where they go (`writer.py`)."""

from __future__ import annotations

import json
from typing import Any

from ..schema import STEP
from .codec import EXACT_INT, LAYOUT, MASK_BITS, MISSING, SIG_DIGITS, as_number, n_masks, prepare, round_sig


def as_numbers(values: dict[str, Any]) -> list[tuple[str, Any]] | None:
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


class StepLines:
    """The lines of each step in turn: the change masks are taken against the steps before, so
    every step must go through the same StepLines, in order."""

    def __init__(self) -> None:
        self._columns: list[str] = []
        self._index: dict[str, int] = {}
        self._floats: set[str] = set()
        self._last_step: dict[str, Any] = {}
        self._layout_written = False

    def last_step(self) -> Any:
        """The step number of the last step encoded (None before any)."""
        return self._last_step.get("step")

    def lines(self, values: dict[str, Any]) -> list[str]:
        """The lines that record one step (a layout record first when the columns grew)."""
        line = self._steady_line(values)  # nearly every step; else the layout may grow
        if line is not None:
            return [line]
        items = as_numbers(values)
        if items is None:  # a value that is no number: the step goes out as a plain record
            return [self._plain_step(values)]
        out = self._grow_layout(items)
        out.append(self._encode(items))
        return out

    def _steady_line(self, values: dict[str, Any]) -> str | None:
        """The step array of a step whose columns and types the layout already has (nearly every
        step), in one pass over `values`: what `_as_numbers` and `_encode` would write; None
        (nothing changed) when the step needs them (a new column, an int column's first float,
        a value that is no plain number), or when the step column is absent."""
        index, last, floats = self._index, self._last_step, self._floats
        if "step" not in values or len(self._columns) > MASK_BITS:
            return None
        mask = 0
        changed: list[tuple[int, str, Any]] = []
        for k, v in values.items():
            j = index.get(k)
            if j is None:
                return None
            t = type(v)
            if t is float:
                if v - v != 0.0:  # NaN or +-inf
                    v = None
                elif k not in floats:
                    return None
                elif k in SIG_DIGITS:
                    v = round_sig(v, SIG_DIGITS[k])
            elif t is not int or not -EXACT_INT < v < EXACT_INT:
                if v is not None:
                    return None
            old = last.get(k, MISSING)
            if old is not MISSING and type(old) is type(v):
                if k == "step" and old is not None and v == old + 1:
                    changed.append((-1, k, v))  # kept, but not written: the reader adds one
                    continue
                if k != "step" and old == v:
                    continue
            mask |= 1 << j
            changed.append((j, k, v))
        changed.sort()
        for _, k, v in changed:
            last[k] = v
        body = ",".join(["null" if v is None else repr(v) for j, _, v in changed if j >= 0])
        return f"[{mask},{body}]" if body else f"[{mask}]"

    def _grow_layout(self, items: list[tuple[str, Any]]) -> list[str]:
        """Add the step's new columns (and ints that became floats) to the layout; the layout record
        when it grew (or was never written)."""
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
            return [json.dumps(layout, separators=(",", ":"))]
        return []

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

    def _plain_step(self, values: dict[str, Any]) -> str:
        values = {k: v if (n := as_number(v)) is MISSING else n for k, v in prepare(values).items()}
        last = self._last_step
        delta = {k: v for k, v in values.items() if k == "step" or last.get(k, MISSING) != v}
        last.update(values)
        return json.dumps({"type": STEP, **delta}, separators=(",", ":"), default=str)
