"""Python's and autograd's state at each step's end: the full collections of the cyclic garbage
collector (so a sudden drop can be told apart as garbage freed), whether gradients were on
(so an inference or evaluation loop is reported as one), whether a profiler was recording
(it keeps an event per op in host memory while it does) and whether a torch.autocast block with
its cast cache was open (it keeps a cast of each new leaf tensor until it exits), and how many
callbacks atexit keeps (each with its arguments, until the process exits). About a microsecond a step."""

from __future__ import annotations

import atexit
import gc
from typing import Any

import torch

from . import Probe, ProbeContext

_is_grad_enabled = torch.is_grad_enabled
_is_inference = torch.is_inference_mode_enabled
_profiler_enabled = getattr(torch._C._autograd, "_profiler_enabled", lambda: True)
_autocast_on = torch.is_autocast_enabled
_autocast_cache_on = torch.is_autocast_cache_enabled
# how many callbacks atexit keeps (CPython's; -1 where there is no such count)
_atexit_callbacks = getattr(atexit, "_ncallbacks", lambda: -1)

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


def autocast_cached(device_types: tuple[str, ...]) -> int:
    """1 while a torch.autocast block for one of `device_types` is open with its cast cache on (it
    keeps the lower-precision copy of each leaf tensor that requires grad it casts until the
    outermost block exits: detect/autocast.py), else 0."""
    if not _autocast_cache_on():
        return 0
    return int(any(_autocast_on(t) for t in device_types))


class RuntimeProbe(Probe):
    name = "runtime"
    autocast_types: tuple[str, ...] = ("cpu",)

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        self.autocast_types = tuple(dict.fromkeys((ctx.device.type, "cpu")))
        return {}

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
            "autocast_cached": autocast_cached(self.autocast_types),
            "atexit_callbacks": _atexit_callbacks(),
        }
