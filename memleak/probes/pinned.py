"""Pinned host memory: the CUDA host allocator's statistics (``pin_memory=True`` in a DataLoader,
``tensor.pin_memory()``, non-blocking copies), read where torch exposes them
(``torch.cuda.memory.host_memory_stats``, torch 2.5 and later). The allocator caches the pinned
blocks it gets from CUDA and hands them out again; a pool that keeps growing is host memory that
is never given back. On a build or a machine without CUDA the probe is skipped.

The pool changes slowly and a read took 29 us on an H200 (a quarter of a percent of an 11 ms
step): it is read on a time budget (``pinned_budget=``, 0.1 % of the run's time by default), a
step without a read writing null (`BudgetedReads`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from . import Probe, ProbeContext, Unavailable
from .allocator import nested_value
from .budget import BudgetedReads

#: Our columns from the documented keys of host_memory_stats().
KEYS = {"pinned_bytes": "allocated_bytes.current", "pinned_active_bytes": "active_bytes.current"}


def pinned_values(stats: Mapping[str, Any]) -> dict[str, int]:
    """Our step columns from a ``host_memory_stats()`` dict (flat, dotted keys) or its nested
    form; keys it lacks (an allocator not used yet returns an empty dict) are left out."""
    out = {}
    for column, key in KEYS.items():
        v = stats[key] if key in stats else nested_value(stats, key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[column] = int(v)
    return out


def host_stats_reader() -> Any:
    """torch's host allocator statistics (nested: flattening them costs more than reading them),
    or None where this build or machine has no CUDA host allocator."""
    memory = getattr(torch.cuda, "memory", None)
    fn = getattr(memory, "host_memory_stats_as_nested_dict", None) or getattr(memory, "host_memory_stats", None)
    if fn is None or not torch.cuda.is_available():
        return None
    return fn


class PinnedProbe(Probe):
    name = "pinned"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        self.read = host_stats_reader()
        if self.read is None:
            raise Unavailable("pinned host memory statistics need CUDA (torch.cuda.memory.host_memory_stats)")
        self.reads = BudgetedReads(float(ctx.options.get("pinned_budget", 0.001)))
        return {"pinned_budget": self.reads.budget.share}

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        return self.reads.sample(lambda: pinned_values(self.read()))
