"""Pinned host memory that grows: the CUDA host allocator's pool (``pinned_bytes``,
probes/pinned.py) judged by detect/growth.py's test.

The allocator caches pinned blocks and hands them out again, so a pool that fills up and stays
is normal; one that keeps growing is pinned host memory never given back: page-locked RAM the
operating system cannot swap or reclaim.
"""

from __future__ import annotations

from ..run import Run
from ..schema import Finding, Kind, Shape, to_jsonable
from ..units import fmt_bytes
from .growth import analyze_growth

NAME = "pinned"
COLUMN = "pinned_bytes"
LOCATION = "pinned host memory (CUDA host allocator)"

FIX = (
    "Something keeps pinned (page-locked) host tensors alive, or asks for ever new sizes: tensors from a "
    "DataLoader with pin_memory=True kept across steps (a list of batches), x.pin_memory() called on "
    "growing buffers, or non_blocking copies to the CPU whose results are kept. Keep pinned buffers of a "
    "fixed size and reuse them, drop references to old batches; torch.accelerator.empty_host_cache() "
    "(recent torch) returns the cached blocks to CUDA."
)


def detect(run: Run) -> list[Finding]:
    if COLUMN not in run.steps or run.steps[COLUMN].notna().sum() < 2:
        return []
    g = analyze_growth(run, COLUMN)
    s = run.steps[COLUMN].dropna()
    rise = float(s.iloc[-1] - s.iloc[0])
    if rise <= 0 or not (g.leak or g.shape in (Shape.BOUNDED, Shape.PLATEAU)):
        return []
    evidence = (
        f"the CUDA host allocator's pinned pool grew from {fmt_bytes(s.iloc[0])} to {fmt_bytes(s.iloc[-1])} "
        f"over {len(s)} steps ({g.shape})",
        *g.evidence,
    )
    return [
        Finding(
            detector=NAME,
            kind=Kind.HOST_GROWTH,
            location=LOCATION,
            bytes_per_step=g.slope,
            total_bytes=rise,
            confidence=g.confidence if g.leak else 1.0,
            evidence=evidence,
            fix=FIX if g.leak else "nothing: the allocator filled its cache of pinned blocks and reuses them",
            leak=g.leak,
            note=not g.leak,
            data=to_jsonable({"column": COLUMN, "shape": g.shape, "slope": g.slope}),
        )
    ]
