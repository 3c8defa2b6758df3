"""Python's and autograd's state at each step's end: the full collections of the cyclic garbage
collector (so a sudden drop can be told apart as garbage freed), whether gradients were on
(so an inference or evaluation loop is reported as one) and whether a profiler was recording
(it keeps an event per op in host memory while it does). About a microsecond a step."""

from __future__ import annotations

import gc
from typing import Any

import torch

from . import Probe

_is_grad_enabled = torch.is_grad_enabled
_is_inference = torch.is_inference_mode_enabled
_profiler_enabled = getattr(torch._C._autograd, "_profiler_enabled", lambda: True)

#: Profilers that keep an event per op in memory (NVTX and ITT only mark ranges for an outside tool).
_KEEPING_PROFILERS = ("KINETO", "LEGACY")


def profiler_on() -> int:
    """1 while torch.profiler or the autograd profiler records ops and keeps their events (not in
    a schedule's wait or warm-up steps, nor under emit_nvtx or emit_itt), else 0; 0 where torch
    has no such switch."""
    # _profiler_enabled first: it costs a tenth of _profiler_type().name right after a step
    if not _profiler_enabled():
        return 0
    active = getattr(torch._C._autograd, "_profiler_type", None)
    return int(active is not None and active().name in _KEEPING_PROFILERS)


class RuntimeProbe(Probe):
    name = "runtime"

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        # Read each step, not counted by a gc callback: a collection can run inside a compiled
        # region, and torch.compile then sees the callback's frame as one more frame to compile.
        # Inline, torch's switches bound once: this runs after every step, with cold caches.
        full = gc.get_stats()[-1]  # the oldest generation: only a full collection frees cycles there
        return {
            "gc_collections": full["collections"],
            "gc_collected": full["collected"],
            "grad_enabled": 1 if _is_grad_enabled() and not _is_inference() else 0,
            "profiler_on": profiler_on(),
        }
