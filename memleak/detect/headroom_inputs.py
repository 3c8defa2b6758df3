"""Headroom over two dimensions: the batch size and the input size (a sequence length, an image
side), for inference and evaluation as much as for training.

At each input size s the peak is fitted against the batch as ``a(s) + b(s) * batch``
(detect/headroom.py). Across input sizes, the bytes per sample grow with s: linearly for
activations, quadratically for attention scores, so ``b(s) = p * s + q * s**2`` with p, q >= 0
(non-negative least squares); the batch-independent part is a line ``a(s) = a0 + a1 * s``. That
predicts the peak, and the largest batch, at an input size that was not measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls

from ..errors import UsageError
from ..units import fmt_bytes
from .headroom import Headroom, largest_batch


@dataclass(frozen=True)
class InputHeadroom:
    """What `memleak.headroom(..., input_sizes=...)` found. ``str()`` reads as a short report."""

    fits: dict[int, Headroom]  # input size -> the batch fit measured at it
    per_sample: tuple[float, float]  # (p, q): bytes per sample = p * s + q * s**2
    fixed: tuple[float, float]  # (a0, a1): batch-independent bytes = a0 + a1 * s
    capacity: float
    margin: float

    def predict(self, batch_size: float, input_size: float) -> float:
        """The fitted peak of a batch at an input size, in bytes (without the margin)."""
        s = float(input_size)
        p, q = self.per_sample
        a0, a1 = self.fixed
        return a0 + a1 * s + (p * s + q * s * s) * float(batch_size)

    def max_batch(self, input_size: int) -> int | None:
        """The largest batch that fits at `input_size`: the measured fit at a measured size, the
        two-dimensional model elsewhere (None: the peak does not grow with the batch)."""
        if input_size in self.fits:
            return self.fits[input_size].max_batch
        s = float(input_size)
        p, q = self.per_sample
        a0, a1 = self.fixed
        return largest_batch(a0 + a1 * s, p * s + q * s * s, self.capacity, self.margin)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": {str(s): h.to_dict() for s, h in self.fits.items()},
            "per_sample": list(self.per_sample),
            "fixed": list(self.fixed),
            "capacity": self.capacity,
            "margin": self.margin,
        }

    def __str__(self) -> str:
        first = next(iter(self.fits.values()))
        where = f" on {first.device}" if first.measured else ""
        lines = [f"headroom{where} by input size: capacity {fmt_bytes(self.capacity)}, safety margin {self.margin:.0%}"]
        for s, h in sorted(self.fits.items()):
            pts = ", ".join(f"{bs} -> {fmt_bytes(p)}" for bs, p in sorted(h.peaks.items()))
            best = "any batch (the peak does not grow)" if h.max_batch is None else str(h.max_batch)
            lines.append(
                f"  input size {s}: peaks {pts}; {fmt_bytes(h.slope)} per sample; largest batch that fits: {best}"
            )
        p, q = self.per_sample
        lines.append(
            f"  fit: bytes per sample = {fmt_bytes(p)} x size + {fmt_bytes(q)} x size^2; "
            f"batch-independent {fmt_bytes(self.fixed[0])} + {fmt_bytes(self.fixed[1])} x size"
        )
        return "\n".join(lines)


def fit_inputs(fits: Mapping[int, Headroom], capacity: float, margin: float) -> InputHeadroom:
    """The two-dimensional model over the batch fits at two or more input sizes."""
    if len(fits) < 2:
        raise UsageError("headroom by input size needs two or more input sizes")
    s = np.array(sorted(fits), dtype=float)
    b = np.array([fits[int(x)].slope for x in s])
    a = np.array([fits[int(x)].intercept for x in s])
    scale = s.max()  # nnls on sizes of order 1: its tolerance is absolute
    coef, _ = nnls(np.column_stack([s / scale, (s / scale) ** 2]), b)
    p, q = float(coef[0]) / scale, float(coef[1]) / scale**2
    a1, a0 = np.polyfit(s, a, 1)
    return InputHeadroom(
        fits=dict(sorted(fits.items())),
        per_sample=(p, q),
        fixed=(float(a0), float(a1)),
        capacity=capacity,
        margin=margin,
    )
