"""PyTorch memory snapshots (``torch.cuda.memory._dump_snapshot``) as pandas tables.

A snapshot is the caching allocator's state at one moment: its segments (memory
taken from the driver with cudaMalloc), the blocks each segment is split into
(live tensors, blocks freed on another stream, free pieces) with the stack that
allocated them, and, when history recording was on, a ring buffer of allocator
actions (``device_traces``). Layouts read (see docs/snapshots.md):

- torch >= 2.1: ``{"segments": [...], "device_traces": [[...]], ...}``; blocks
  carry ``address``, ``requested_size`` and ``frames``.
- torch 1.13/2.0: the same dict, but blocks carry ``history``
  (``[{"addr", "real_size", "frames"}]``, the current allocation first) instead
  of ``address``/``requested_size``/``frames``.
- a plain list of segments: a pickled ``torch.cuda.memory_snapshot()``.

Reading the pickle is `memleak.io`'s job; findings are `memleak.detect.snapshot`'s and the
summary `memleak.report`'s: this package only builds the tables.
"""

from .layout import NotASnapshot
from .stacks import NO_STACK, site_of
from .tables import ACTIONS, ALLOCATED, BLOCK_COLUMNS, INACTIVE, PENDING_FREE, SEGMENT_COLUMNS, TRACE_COLUMNS
from .views import FRAGMENTATION_COLUMNS, Snapshot, diff, parse_alloc_conf

__all__ = [
    "ACTIONS",
    "ALLOCATED",
    "BLOCK_COLUMNS",
    "FRAGMENTATION_COLUMNS",
    "INACTIVE",
    "NO_STACK",
    "PENDING_FREE",
    "SEGMENT_COLUMNS",
    "TRACE_COLUMNS",
    "NotASnapshot",
    "Snapshot",
    "diff",
    "parse_alloc_conf",
    "site_of",
]
