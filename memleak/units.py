"""Byte units (binary: KiB, MiB, GiB) for printing and for parsing user limits."""
from __future__ import annotations

import re

from .errors import UsageError

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def fmt_bytes(n: float | int | None, signed: bool = False) -> str:
    """1536 -> '1.5 KiB'. Binary units; None and NaN print as '-'."""
    if n is None or n != n:
        return "-"
    sign = "-" if n < 0 else ("+" if signed and n > 0 else "")
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
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
