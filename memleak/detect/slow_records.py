"""A holder that gains a small tensor every several steps (a confusion matrix kept per epoch, a
metric kept per log interval) grows with the epochs, not the steps: at a few bytes a step it is a
record the user meant to keep, not a leak. A short tracked run makes its rate look bigger than it
is (epochs of 8 steps there, of thousands in the real run), so only a holder that gains few
tensors a step, each small, with no autograd graph, is read this way (`suspects.rank`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..schema import Kind, Suspect
from ..units import fmt_bytes
from .thresholds import not_a_leak

#: Fewer new tensors a step than this (one every 4 steps or less often)...
SPARSE_PER_STEP = 0.25
#: ...of at most this many bytes each: a record (a metric, a per-class vector, a confusion matrix),
#: not a batch's outputs (64 rows of 10 logits: 2.5 KiB).
RECORD_BYTES = 1024
FIX = (
    "None needed for a record kept once an epoch or log interval: it grows with the epochs, not the steps. "
    "If it is kept more often in a longer run, store numbers (`.item()`, `.tolist()`) or bound it "
    "(`collections.deque(maxlen=...)`)."
)


def slow_record(suspect: Suspect, data: Mapping[str, Any]) -> str | None:
    """Why the growing holder `suspect` (its finding's `data`: `detect/holder_growth.py`) is a record
    kept every few steps and no leak, or None."""
    if suspect.kind not in (Kind.SURVIVING_TENSORS, Kind.CACHED_TENSOR):
        return None
    steps, count = data.get("steps") or [], data.get("count") or []
    if len(steps) < 2 or len(count) != len(steps) or steps[-1] <= steps[0]:
        return None
    if any(data.get("grad") or []) or any(data.get("nodes") or []):
        return None  # tensors with graphs keep more than their bytes
    per_step = (count[-1] - count[0]) / (steps[-1] - steps[0])
    if not 0 < per_step < SPARSE_PER_STEP or suspect.bytes_per_step > RECORD_BYTES * per_step:
        return None
    return (
        f"one small tensor every {1 / per_step:.0f} steps ({fmt_bytes(suspect.bytes_per_step * 1e6)} in a "
        "million steps) is a record kept every few steps, like a per-epoch result, not a leak at this rate"
    )


def as_record(suspect: Suspect, why: str) -> Suspect:
    """`suspect` as it reads once `why` (from `slow_record`) explains it: no leak."""
    return not_a_leak(suspect, why, FIX)
