"""AMP's GradScaler: its loss scale at each step's end, so that a step it skipped (inf or NaN
gradients: it halves the scale and does not call optimizer.step()) can explain a drop.

The scaler is looked for once, when tracking starts, among the variables of the code that
started it (and attributes of its ``self``), and held through a weak reference. Its scale is a
tensor on the device; reading it must not wait for the GPU, so on CUDA it is copied without
blocking into pinned memory and read at a later step, once the copy has landed."""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch

from . import Probe, ProbeContext
from .frames import in_sight


def find_scaler(frame: Any) -> Any:
    """The first torch.amp GradScaler held by a local, a global or ``self`` in `frame` and its callers."""
    found = in_sight(frame, lambda v: isinstance(v, torch.amp.GradScaler))
    return next(iter(found.values()))[1] if found else None


class ScalerProbe(Probe):
    name = "scaler"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        scaler = find_scaler(sys._getframe(1))
        self.ref = weakref.ref(scaler) if scaler is not None else None
        self.buf: torch.Tensor | None = None  # one pinned float the scale is copied into, made once
        self.pending: Any = None  # the CUDA event of a copy in flight
        return {"grad_scaler": scaler is not None} if scaler is not None else {}

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        scaler = self.ref() if self.ref is not None else None
        scale = getattr(scaler, "_scale", None)
        if scaler is None or not getattr(scaler, "_enabled", False) or not isinstance(scale, torch.Tensor):
            return {}
        if scale.device.type == "cpu":
            return {"grad_scale": float(scale.item())}
        out: dict[str, Any] = {}
        if self.pending is not None and self.buf is not None and self.pending.query():  # landed: no wait
            out["grad_scale"] = float(self.buf.item())
            self.pending = None
        if self.pending is None and scale.device.type == "cuda":
            if self.buf is None:
                self.buf = torch.empty((), dtype=scale.dtype, pin_memory=True)
            self.buf.copy_(scale.reshape(()), non_blocking=True)
            self.pending = torch.cuda.Event()
            self.pending.record()
        return out

    def stop(self) -> None:
        self.pending = self.buf = None
        self.ref = None
