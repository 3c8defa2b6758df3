"""Probes read memory at step boundaries (and, for some, in hooks).

Each probe is started once, sampled at the end of every step, and stopped
once, also when the loop raises. A probe that cannot work here (no GPU, no
NVML library) raises `Unavailable` from `start`; the tracker records why once
and goes on without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import torch

from ..errors import UsageError
from ..schema import Level


class Unavailable(Exception):
    """This probe cannot run in this process; the message says why."""


@dataclass
class ProbeContext:
    """What a probe may know about the run it serves."""

    device: torch.device
    level: str
    model_ref: Callable[[], Any] = lambda: None  # weak reference: never keeps the model alive
    optimizer_ref: Callable[[], Any] = lambda: None
    emit: Callable[[str, dict], None] = lambda type_, body: None  # write a non-step record
    options: dict[str, Any] = field(default_factory=dict)
    # whether the loop's optimizer steps run inside a compiled function (the whole training step is
    # compiled): a hook or mode installed for a step would then be traced into it
    compiled_step: Callable[[], bool] = lambda: False
    # whether the live check's latest look took the host heap or RSS for a leak (recorder/live.py)
    host_leaking: Callable[[], bool] = lambda: False


class Probe:
    name = "probe"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        """Begin; return header facts (device name, versions) to record. Raise Unavailable to opt out."""
        return {}

    def step_begin(self, step: int) -> None:
        pass

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        """Values for the step record of the step that just ended."""
        return {}

    def set_detail(self, step: int, on: bool) -> None:
        """The auto level's windows: from `step` on, sample densely (`on`), or not at all, keeping
        what was learned (tags, weak references) for the next window. The fixed levels never call
        it; the counters probes, which read every step, ignore it."""

    def check(self, step: int) -> None:
        """The auto level's check, at the end of `step` between its windows: the cheapest look that
        counts what holds the user's tensors (the tensor probe's reference walk, no tagging). The
        others do nothing."""

    def in_optimizer(self, on: bool) -> None:
        """torch's own optimizer step starts (`on`) or ended: no closure and no hook of the user's runs
        in it, so nothing made in it is the user's (a probe watching ops may look away)."""

    def quiet(self, min_data_bps: float) -> bool:
        """Level auto, while the run is young: whether what this probe has seen so far asks for no
        more young detail (see `recorder/escalation.py`, QUIET_AT); plain Python data gaining less
        than `min_data_bps` a step is no reason (no detector names it). Probes that gather no
        evidence of their own say yes."""
        return True

    def finish(self, step: int) -> None:
        """The run ended; `step` was its last step (called once, before stop)."""

    def stop(self) -> None:
        """Undo everything start did. Must be safe to call twice."""


def parse_device(device: Any) -> torch.device:
    """`device` as a torch.device this machine has; UsageError saying why not otherwise."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(f"device {device!r} is not a device torch knows (cpu, cuda, cuda:1, mps, xpu ...)") from None
    if dev.type in ("cpu", "meta"):
        return dev
    backend = getattr(torch, dev.type, None)
    available = getattr(backend, "is_available", None)
    if available is None or not available():
        raise UsageError(f"device {str(dev)!r} is not available on this machine (torch {torch.__version__})")
    count = getattr(backend, "device_count", None)
    if dev.index is not None and count is not None and dev.index >= count():
        raise UsageError(f"device {str(dev)!r} does not exist: this machine has {count()} {dev.type} device(s)")
    return dev


def resolve_device(device: Any = None, model: Any = None) -> torch.device:
    """The device whose memory matters: the one given, else the model's, else the current accelerator, else CPU."""
    if device is not None:
        dev = parse_device(device)
    elif model is not None and next(iter(model.parameters()), None) is not None:
        dev = next(iter(model.parameters())).device
    else:
        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        dev = torch.device(acc.type) if acc is not None else torch.device("cpu")
    if dev.type != "cpu" and dev.index is None:
        dev = torch.device(dev.type, torch.accelerator.current_device_index())
    return dev


def probes_for_level(level: str) -> list[Probe]:
    """The probes each level runs, cheapest first."""
    from .allocator import AllocatorProbe
    from .census import CensusProbe
    from .host import HostProbe
    from .nvml import NvmlProbe
    from .pinned import PinnedProbe
    from .runtime import RuntimeProbe
    from .scaler import ScalerProbe
    from .workers import WorkerProbe

    probes: list[Probe] = [AllocatorProbe(), NvmlProbe(), HostProbe(), PinnedProbe(), WorkerProbe(), RuntimeProbe()]
    probes.append(ScalerProbe())
    if level in (Level.MODULES, Level.FULL, Level.AUTO):
        from .modules import ModuleProbe

        probes.append(ModuleProbe())
    if level in (Level.FULL, Level.AUTO):  # auto: the tracker turns their detail on in windows
        from .alloc_sites import AllocSitesProbe
        from .tensors import TensorProbe

        probes.extend([CensusProbe(), TensorProbe(), AllocSitesProbe()])
    return probes


def is_oom(exc: BaseException | None) -> TypeGuard[BaseException]:
    """An out-of-memory error on any device (CPU allocators raise plain RuntimeErrors)."""
    if exc is None:
        return False
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "out of memory" in str(exc))
