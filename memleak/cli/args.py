"""argparse types: numbers checked where they are parsed, so a wrong one gets one line."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def share(text: str) -> float:
    """argparse type: a share from 0 (inclusive) to 1 (exclusive)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"a share of the capacity from 0 to 1 (0.1 keeps 10% free), not {v}")
    return v
