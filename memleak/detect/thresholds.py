"""The smallest growth the detectors call a leak, apart from the detectors (no scipy, no pandas),
so the recorder's live screen can skip series that cannot reach it without importing them."""

from __future__ import annotations

import dataclasses
from typing import Any

#: The rise must be this share of the series' level besides clearing the noise (growth_stats);
#: RSS creeps benignly, so it needs more.
MIN_REL_GROWTH = 0.001
MIN_REL_GROWTH_HOST = 0.02
#: The C heap of a process that trains on an accelerator also holds what the device's libraries
#: keep per new shape or block (cuBLAS plans, the caching allocator's block lists): with shapes
#: that vary it creeps by kilobytes a step. Measured on an H100 (tests/data/gpu/fragmenting):
#: +530 KiB over 60 steps of drifting lengths, 0.12 % of a 440 MiB heap.
MIN_REL_GROWTH_DEVICE_HEAP = 0.01
#: Bytes a step a holder of plain Python data must gain to be named (`object_holders.py`): a
#: loop's own logging (a few numbers a step) gains less.
MIN_DATA_BPS = 2 * 1024
#: What a tensor kept costs the host heap beyond its data: its Python object, TensorImpl and
#: StorageImpl, allocation headers and alignment (measured: 385-402 B a tensor, torch 2.13, CPU
#: tensors of 1 to 16384 floats kept in a dict). A holder of many small tensors (a memo of short
#: samples, 0-d losses) grows the heap by several times their bytes.
TENSOR_HOST_OVERHEAD = 390
#: ...and what its autograd node costs there when it carries one of its own (a 0-d view of a per-sample
#: loss keeps its SelectBackward0: 1,127 B a view with its graph against 534 B without, torch 2.13).
GRAD_FN_HOST_OVERHEAD = 590


def min_rel_growth(column: str | None, accelerator: bool = False) -> float:
    """The share of its level a rise of `column` must reach to count as growth; `accelerator`:
    the run's tensors live on a device, so host memory is not where they grow."""
    if column == "rss_bytes":
        return MIN_REL_GROWTH_HOST
    return MIN_REL_GROWTH_DEVICE_HEAP if accelerator and column == "heap_bytes" else MIN_REL_GROWTH


#: What growth explained as no leak (new input shapes, a fragmented heap) keeps as its confidence:
#: under the bar that makes a verdict "leak".
NO_LEAK_CONFIDENCE = 0.45


def not_a_leak(item: Any, why: str, fix: str) -> Any:
    """`item` (a Finding or a Suspect of growth) as it reads once `why` explains it as no leak."""
    return dataclasses.replace(
        item, leak=False, confidence=min(item.confidence, NO_LEAK_CONFIDENCE), evidence=(*item.evidence, why), fix=fix
    )
