"""How memleak writes quantities: bytes (binary units: KiB, MiB, GiB), durations and rank lists,
and how it parses the sizes users give."""

from __future__ import annotations

import re

from .errors import UsageError

#: One past the largest integer a run file or snapshot table holds: every count, size and address fits an int64.
INT64_LIMIT = 1 << 63

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
}


def fmt_bytes(n: float | int | None, signed: bool = False) -> str:
    """1536 -> '1.5 KiB'. Binary units; None and NaN print as '-'."""
    if n is None or n != n:
        return "-"
    sign = "-" if n < 0 else ("+" if signed and n > 0 else "")
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            if unit != "B":
                return f"{sign}{n:.1f} {unit}"
            # under a byte (a slope: a few bytes every several steps) is not "+0 B"
            return f"{sign}{n:.2g} B" if 0 < n < 1 else f"{sign}{n:.0f} B"
        n /= 1024
    raise AssertionError("unreachable")


def parse_bytes(text: str | int | float) -> float:
    """'1 MiB', '512KiB', '2GB', 1024 -> bytes. A trailing '/step' is accepted and ignored."""
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*(/\s*step)?\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read {text!r} as a size: write e.g. '512 KiB', '1 MiB/step' or a number of bytes")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def fmt_duration(seconds: float | None) -> str:
    """90 -> '1.5 min'; None and NaN print as '-'."""
    if seconds is None or seconds != seconds:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    ranks = sorted(ranks)
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(
            str(ranks[i]) if j == i else (f"{ranks[i]}, {ranks[j]}" if j == i + 1 else f"{ranks[i]}-{ranks[j]}")
        )
        i = j + 1
    return ", ".join(parts)


def where_ranks(ranks: list[int]) -> str:
    """[1] -> 'rank 1'; [0, 1, 2] -> 'ranks 0-2'."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def fmt_value(value: object) -> str:
    """A value as an error message quotes it: short, never a 400-digit number, and never the
    repr of a container (which may be deep, or share one big item a million times)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return f"a {type(value).__name__} of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, (str, bytes)) and len(value) > 40:
        return f"{value[:30]!r}... ({type(value).__name__} of {len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({type(value).__name__})"
