"""Python's and autograd's state at each step's end: the full collections of the cyclic garbage
collector (so a sudden drop can be told apart as garbage freed) and whether gradients were on
(so an inference or evaluation loop is reported as one)."""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import torch

from . import Probe, ProbeContext


def grad_enabled() -> int:
    """1 when autograd records at this moment, 0 under no_grad or inference_mode."""
    return int(torch.is_grad_enabled() and not torch.is_inference_mode_enabled())


class RuntimeProbe(Probe):
    name = "runtime"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        # Full collections are counted as they end (a gc callback; a loop runs few), not read each
        # step: gc.get_stats() builds three dicts, ~15 us a step with the caches a training step left.
        full = gc.get_stats()[-1]  # the oldest generation: only a full collection frees cycles there
        self.collections = int(full["collections"])
        self.collected = int(full["collected"])
        gc.callbacks.append(self._on_gc)
        return {}

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self.collections += 1
            self.collected += int(info.get("collected", 0))

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        return {"gc_collections": self.collections, "gc_collected": self.collected, "grad_enabled": grad_enabled()}

    def stop(self) -> None:
        with contextlib.suppress(ValueError):  # already taken off
            gc.callbacks.remove(self._on_gc)
