"""The accelerator's caching allocator: memory_stats at each step end.

Reads torch.cuda on CUDA and torch.accelerator elsewhere (XPU, ...), so the
same columns appear on any device whose backend keeps allocator statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from . import Probe, ProbeContext, Unavailable

# memory_stats key -> step column
STAT_COLUMNS = {
    "allocated_bytes.all.current": "allocated_bytes",
    "reserved_bytes.all.current": "reserved_bytes",
    "active_bytes.all.current": "active_bytes",
    "inactive_split_bytes.all.current": "inactive_split_bytes",
    "requested_bytes.all.current": "requested_bytes",
    "allocated_bytes.all.peak": "allocated_peak_bytes",
    "reserved_bytes.all.peak": "reserved_peak_bytes",
    "requested_bytes.all.peak": "requested_peak_bytes",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
}
#: The same keys as paths into the nested dict, split once: this runs every step.
STAT_PATHS = tuple((tuple(key.split(".")), col) for key, col in STAT_COLUMNS.items())


def read_allocator(device: torch.device, driver: bool = False) -> dict[str, Any]:
    """The allocator columns for `device` now (empty for CPU). `driver`: also the driver's free
    and total bytes (``cudaMemGetInfo``), read at an OOM only: the call can wait for the device
    to finish its queued work, which would stall a loop that reads it every step."""
    if device.type == "cpu":
        return {}
    if device.type == "cuda":
        # the nested dict as torch keeps it: flattening it into memory_stats' keys costs more than reading it
        nested = torch.cuda.memory_stats_as_nested_dict(device.index)
        values = {col: int(v) for path, col in STAT_PATHS if (v := _at(nested, path)) is not None}
        if driver and torch.cuda.is_initialized():
            free, total = torch.cuda.mem_get_info(device.index)
            values["device_free_bytes"] = int(free)
            values["device_total_bytes"] = int(total)
        return values
    stats = torch.accelerator.memory_stats(device.index)  # XPU and other accelerators: the flat keys
    return {col: int(stats[key]) for key, col in STAT_COLUMNS.items() if key in stats}


def nested_value(nested: Mapping[str, Any], dotted: str) -> Any:
    """``nested["allocated_bytes"]["all"]["current"]`` for "allocated_bytes.all.current"; None if absent."""
    return _at(nested, dotted.split("."))


def _at(nested: Mapping[str, Any], path: tuple[str, ...] | list[str]) -> Any:
    node: Any = nested
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


class AllocatorProbe(Probe):
    name = "allocator"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        self.device = ctx.device
        if self.device.type == "cpu":
            raise Unavailable(
                "the tracked device is the CPU, which has no caching allocator; "
                "the heap counter and the live-tensor census stand in for it"
            )
        try:
            read_allocator(self.device)
        except Exception as e:  # a backend without memory_stats (e.g. MPS in some versions)
            raise Unavailable(f"{self.device.type} allocator statistics are not available: {e}") from None
        acc = torch.accelerator.current_accelerator()
        assert acc is not None  # the device is not the CPU and has allocator statistics
        facts: dict[str, Any] = {"device_name": acc.type}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device.index)
            facts = {
                "device_name": props.name,
                "device_total_bytes": int(props.total_memory),
                "cuda_version": torch.version.cuda,
            }
        return facts

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        return read_allocator(self.device)
