"""Headroom: the largest batch size that fits, from peaks at two or more batch sizes.

The peak memory of a training step is, to a very good approximation, a constant
(parameters, gradients, optimizer state, workspace) plus a part proportional to
the batch (activations and inputs). memleak fits ``peak = a + b * batch`` to the
measured points (the exact line through two points; repeated medians, robust to
a bad point, through three or more) and predicts the largest batch whose peak,
plus the safety `margin`, fits in `capacity`. With `target_batch`, it gives the
gradient-accumulation steps (and the micro-batch) that keep that effective batch.
Measuring the peaks is `memleak.probes.peak`'s job; `memleak.headroom` does both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..units import fmt_bytes


@dataclass(frozen=True)
class Headroom:
    """What `memleak.headroom` found. ``str()`` reads as a short report."""

    peaks: dict[int, float]  # batch size -> peak bytes (measured or given)
    intercept: float  # a: bytes that do not depend on the batch
    slope: float  # b: bytes per sample of the batch
    capacity: float  # bytes the peak must fit in
    margin: float  # safety share: fit(batch) * (1 + margin) <= capacity
    max_batch: int | None  # largest batch that fits; None when the peak does not grow with the batch
    device: str = "?"
    measured: bool = False  # peaks measured here (True) or given (False)
    target_batch: int | None = None
    accumulation_steps: int | None = None  # steps of micro_batch that make target_batch
    micro_batch: int | None = None
    residuals: dict[int, float] = field(default_factory=dict)  # batch -> (measured - fit) / measured
    # confirm=True: the largest batch that ran in real steps near the fitted limit, the smallest
    # that ran out of memory (None when the fitted limit itself ran), and the steps that took
    confirmed_batch: int | None = None
    oom_batch: int | None = None
    confirm_tries: int = 0

    def predict(self, batch_size: float) -> float:
        """The fitted peak at `batch_size`, in bytes (without the margin)."""
        return self.intercept + self.slope * float(batch_size)

    @property
    def effective_batch(self) -> int | None:
        """The batch reached with gradient accumulation, when a target batch was given."""
        if self.accumulation_steps is None or self.micro_batch is None:
            return None
        return self.accumulation_steps * self.micro_batch

    @property
    def usable(self) -> float:
        """Capacity left once the margin is set aside."""
        return self.capacity / (1.0 + self.margin)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, as `memleak headroom --json` prints them."""
        return {
            "peaks": {str(k): v for k, v in self.peaks.items()},
            "intercept": self.intercept,
            "slope": self.slope,
            "capacity": self.capacity,
            "margin": self.margin,
            "max_batch": self.max_batch,
            "device": self.device,
            "measured": self.measured,
            "target_batch": self.target_batch,
            "accumulation_steps": self.accumulation_steps,
            "micro_batch": self.micro_batch,
            "residuals": {str(k): v for k, v in self.residuals.items()},
            "confirmed_batch": self.confirmed_batch,
            "oom_batch": self.oom_batch,
            "confirm_tries": self.confirm_tries,
        }

    def __str__(self) -> str:
        how = "measured" if self.measured else "given"
        where = f" on {self.device}" if self.measured else ""
        lines = [f"headroom{where}: capacity {fmt_bytes(self.capacity)}, safety margin {self.margin:.0%}"]
        pts = ", ".join(f"{bs} -> {fmt_bytes(p)}" for bs, p in sorted(self.peaks.items()))
        lines.append(f"  peaks {how}: {pts}")
        sign = "-" if self.slope < 0 else "+"
        fit = f"  fit: peak = {fmt_bytes(self.intercept)} {sign} {fmt_bytes(abs(self.slope))} x batch"
        if len(self.peaks) > 2:
            worst = max(abs(r) for r in self.residuals.values()) if self.residuals else 0.0
            fit += f" (repeated medians over {len(self.peaks)} points; worst residual {worst:.1%})"
        lines.append(fit)
        if self.max_batch is None:
            lines.append(
                "  the peak does not grow with the batch size: any batch fits as far as these "
                "points tell; measure at larger batch sizes"
            )
        elif self.max_batch < 1:
            lines.append(
                f"  no batch fits: the batch-independent part alone ({fmt_bytes(self.intercept)}) "
                f"with the margin exceeds {fmt_bytes(self.usable)}"
            )
        elif self.oom_batch is not None:
            lines.append(
                f"  largest batch that fits: {self.max_batch} (batch {self.confirmed_batch} ran and filled the "
                f"{fmt_bytes(self.capacity)}; kept {self.margin:.0%} below it)"
            )
            lines += self._confirmation()
        else:
            lines.append(
                f"  largest batch that fits: {self.max_batch} (predicted peak "
                f"{fmt_bytes(self.predict(self.max_batch))}, "
                f"{fmt_bytes(self.predict(self.max_batch) * (1 + self.margin))} "
                f"with the margin, of {fmt_bytes(self.capacity)})"
            )
            lines += self._confirmation()
        if self.target_batch is not None and self.accumulation_steps is not None:
            if self.accumulation_steps == 1:
                lines.append(f"  target batch {self.target_batch}: fits in one step, no gradient accumulation needed")
            else:
                eff = self.effective_batch
                extra = "" if eff == self.target_batch else f" (effective batch {eff}: no divisor fits)"
                lines.append(
                    f"  target batch {self.target_batch}: {self.accumulation_steps} gradient-accumulation "
                    f"steps of {self.micro_batch}{extra}"
                )
        return "\n".join(lines)

    def _confirmation(self) -> list[str]:
        """What real steps near the limit showed, or why to take them."""
        if self.oom_batch is not None and self.confirmed_batch is not None:
            return [
                f"  confirmed on the device: batch {self.oom_batch} ran out of memory and {self.confirmed_batch} "
                f"ran ({self.confirm_tries} steps tried); the fit alone said {self._fitted_limit()}"
            ]
        if self.confirmed_batch is not None:
            return [f"  confirmed on the device: one step at batch {self.confirmed_batch} ran"]
        top = max(self.peaks)
        if self.max_batch is not None and self.max_batch > 4 * top:
            return [
                f"  note: that is {self.max_batch / top:.0f}x the largest batch measured; memory per sample can "
                "grow at large batches: confirm=True tries it with real steps"
            ]
        return []

    def _fitted_limit(self) -> int | None:
        return largest_batch(self.intercept, self.slope, self.capacity, 0.0)


# ---------------------------------------------------------------- fit and prediction


def fit_line(peaks: Mapping[int, float]) -> tuple[float, float]:
    """(a, b) of peak = a + b * batch: the line through two points; through more, Siegel's
    repeated medians (the median over points of each point's median slope to the others),
    which one bad point in three, or almost half the points, cannot drag away."""
    xs = sorted(peaks)
    if len(xs) < 2:
        raise UsageError("headroom needs peaks at two or more different batch sizes")
    if len(xs) == 2:
        (x0, x1) = xs
        b = (peaks[x1] - peaks[x0]) / (x1 - x0)
        return peaks[x0] - b * x0, b
    b = _median([_median([(peaks[xj] - peaks[xi]) / (xj - xi) for xj in xs if xj != xi]) for xi in xs])
    a = _median([peaks[x] - b * x for x in xs])
    return a, b


def _median(v: list[float]) -> float:
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def largest_batch(a: float, b: float, capacity: float, margin: float) -> int | None:
    """The largest batch whose fitted peak, with the margin, fits in `capacity` (None: the peak does not grow)."""
    if b <= 0:
        return None
    return max(0, math.floor((capacity / (1.0 + margin) - a) / b + 1e-9))


def accumulation(target: int, max_batch: int) -> tuple[int, int]:
    """(steps, micro batch) with steps * micro == target and micro <= max_batch, fewest steps;
    when no divisor of target is small enough in few steps, the fewest steps that cover it."""
    if target <= max_batch:
        return 1, target
    first = -(-target // max_batch)
    for k in range(first, min(target, 4 * first) + 1):
        if target % k == 0:
            return k, target // k
    return first, -(-target // first)
