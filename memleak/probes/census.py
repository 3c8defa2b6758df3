"""A device-agnostic live-tensor census: bytes and count of live tensor storages per device.

It walks every object the garbage collector tracks (a tenth of a second or more
in a process with torch loaded), so it runs on a time budget: a census is taken
only when the step time since the last one pays for it at `budget` (5 % by
default), and always on the first step. At level auto it runs only in the windows, on the
first window's first step and then on the budget (in the young steps it would be one value and
no trend, bought for a census's time: a hundredth of a short run). Steps without one have NaN.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

import torch

from ..schema import Level
from . import Probe, ProbeContext


def live_tensors() -> list[torch.Tensor]:
    """Every tensor object alive in this process that the garbage collector sees.

    Tests the type, not the object: `isinstance` would read `__class__`, which lazy modules
    answer with deprecation warnings. The tensor types are torch.Tensor's subclasses as they are
    now, looked up once a walk (a set kept between walks would keep every class it saw alive),
    so the walk over every object is one set lookup each.
    """
    kinds = _tensor_types()
    return [obj for obj in gc.get_objects() if type(obj) in kinds]


def _tensor_types() -> set[type]:
    """torch.Tensor and its subclasses, less torch.compile's FakeTensors."""
    fake = _fake_tensor_type()
    kinds: set[type] = {torch.Tensor}
    todo: list[type] = [torch.Tensor]
    while todo:
        subs: list[type] = type.__subclasses__(todo.pop())
        for sub in subs:
            if sub not in kinds and not (fake is not None and issubclass(sub, fake)):
                kinds.add(sub)
                todo.append(sub)
    return kinds


def _fake_tensor_type() -> type | None:
    """torch.compile's FakeTensor class once it is loaded: its tracing tensors (kept in dynamo's
    caches) hold no memory, and reading their storage warns in the user's run."""
    mod = sys.modules.get("torch._subclasses.fake_tensor")
    return getattr(mod, "FakeTensor", None)


def storage_key(t: torch.Tensor) -> tuple[str, int, int] | None:
    """(device, data pointer, bytes) of a tensor's storage; None for tensors without one."""
    try:
        s = t.untyped_storage()
        return str(t.device), s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, meta-less subclasses, fakes
        return None


def take_census() -> dict[str, tuple[int, int]]:
    """{device: (bytes, storages)} over live tensors; views of one storage count once."""
    seen: dict[tuple[str, int], int] = {}
    for t in live_tensors():
        key = storage_key(t)
        if key is not None and key[2] > 0:
            seen[key[:2]] = key[2]
    totals: dict[str, list[int]] = {}
    for (device, _), nbytes in seen.items():
        acc = totals.setdefault(device, [0, 0])
        acc[0] += nbytes
        acc[1] += 1
    return {d: (b, n) for d, (b, n) in totals.items()}


class CensusProbe(Probe):
    name = "census"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        self.device = str(ctx.device)
        self.budget = float(ctx.options.get("census_budget", 0.05))
        # step time's share earned and not yet spent on censuses. The first step always gets one (at
        # level auto the first window's first step: the series' first point); it is paid back like
        # any other before the next, so the budget holds over the run, first census included, from
        # the time it has paid for one census on.
        self.credit = 0.0
        self.first = True
        self.last_cost = 0.0
        self.window: bool | None = None  # the auto level's window: None at a fixed level
        if ctx.level == Level.AUTO:
            self.window = False  # none in the young steps: the first window's first step takes the first
        return {"census_budget": self.budget}

    def set_detail(self, step: int, on: bool) -> None:
        self.window = on

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        if self.window is False:  # the auto level outside its windows: no census, no credit
            return {"tensor_bytes": None, "tensor_count": None}
        self.credit += step_seconds * self.budget
        if not self.first and self.credit < self.last_cost:
            return {"tensor_bytes": None, "tensor_count": None}
        self.first = False
        t0 = time.perf_counter()
        with torch._C.DisableTorchFunction():  # another probe's TorchFunctionMode may still be on
            census = take_census()
        self.last_cost = time.perf_counter() - t0
        self.credit = min(self.credit, self.last_cost) - self.last_cost  # this one paid; no credit saved up
        nbytes, count = census.get(self.device, (0, 0))
        values: dict[str, Any] = {"tensor_bytes": nbytes, "tensor_count": count, "census_seconds": self.last_cost}
        if self.device != "cpu" and "cpu" in census:
            values["host_tensor_bytes"] = census["cpu"][0]
        return values
