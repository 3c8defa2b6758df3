"""What the tracker writes when something happens to the run it watches: an OOM's event with the
counters at that moment, and the allocator history dumped beside the run file."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..io import RecordSink
from ..io.runfiles import free_path

log = logging.getLogger("memleak")


def oom_counters(device: torch.device) -> dict[str, Any]:
    """Host RSS and, where it can be read, the allocator's counters, as the OOM leaves them."""
    from ..probes.allocator import read_allocator
    from ..probes.host import rss_bytes

    counters: dict[str, Any] = {"rss_bytes": rss_bytes()}
    try:
        counters.update(read_allocator(device, driver=True))
    except Exception:
        pass
    return counters


def start_history(sink: RecordSink, record_history: bool | int) -> bool:
    """Turn on the allocator's memory history (for the snapshots at an OOM or a leak); whether it is on."""
    from ..probes import history

    entries = 100_000 if record_history is True else int(record_history)
    if not history.start(entries):
        sink.event("probe_skipped", probe="history", reason="memory history needs CUDA")
        return False
    return True


def dump_history(sink: RecordSink, run_path: Path, name: str, step: int) -> None:
    """Dump the allocator history to `name` beside the run file (never over a file already there)
    and say so in an event; a dump that fails is a warning and an event, never an exception."""
    from ..probes import history

    target = free_path(run_path.parent / name)
    try:
        written = history.dump(target)
    except Exception as e:  # a failed dump must never hide the OOM or leak being reported
        log.warning("memleak: could not write the memory snapshot %s: %s", target, e)
        sink.event("snapshot_failed", path=target.name, error=repr(e))
        return
    if written:
        sink.event("snapshot", path=target.name, step=step)


def read_now(
    column: str, heap: Callable[[], int] | None, own: Callable[[], float], device: torch.device
) -> float | None:
    """`column` read again now, less memleak's own bytes (`own()`), or None where it cannot be (the
    live check confirms a growth on a fresh reading)."""
    from ..probes.host import rss_bytes

    if column == "heap_bytes" and heap is not None:
        return float(heap() - own())
    if column == "rss_bytes":
        v = rss_bytes()
        return None if v is None else float(v - own())
    if column == "allocated_bytes" and device.type == "cuda":
        return float(torch.cuda.memory_allocated(device))
    return None
