"""Host memory: RSS, and the C heap's in-use bytes where glibc reports them.

The heap counter matters on CPU: tensor storages are malloc'ed, so a CPU
tensor leak shows there byte for byte. The tracker reads it (`heap_bytes`)
once per step, before any probe samples, since the same reading is the base it
measures memleak's own bytes from; this probe reads RSS (every step at first, then every
RSS_EVERY-th).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

from . import Probe, ProbeContext

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: RSS is read every step for the first RSS_DENSE_STEPS steps (a short run's whole series), then
#: every RSS_EVERY-th step (the others' value is empty): the first read of /proc after a training
#: step costs about 20 us, a tenth of that warm, as much as the heap counter, for a series that
#: moves by pages.
RSS_DENSE_STEPS = 32
RSS_EVERY = 4


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


#: The C heap's free bytes (glibc's fordblks: freed memory malloc keeps for reuse) at the last
#: heap read, from the same call as its bytes in use; the host probe writes it beside RSS, which a
#: heap that keeps ever more freed memory grows (fragmentation) while its bytes in use stay flat.
last_free: list[int | None] = [None]


def heap_counter() -> Callable[[], int] | None:
    """A function returning the C heap's bytes in use (arena plus mmap'ed chunks), or None
    where glibc's mallinfo2 is not available."""
    info = _mallinfo2()
    if info is None:
        return None

    def heap_bytes() -> int:
        i = info()
        last_free[0] = int(i.fordblks)
        return int(i.uordblks + i.hblkhd)

    return heap_bytes


def statm_resident(fd: int) -> tuple[int, int]:
    """(resident bytes, of them the pages backed by a file or shared memory) in an open
    ``/proc/PID/statm`` (re-read from its start)."""
    fields = os.pread(fd, 128, 0).split()
    return int(fields[1]) * PAGE, int(fields[2]) * PAGE


def statm_rss(fd: int) -> int:
    """The resident set size in an open ``/proc/PID/statm``."""
    return statm_resident(fd)[0]


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * PAGE
    except OSError:
        pass
    try:
        import psutil  # optional, for macOS and Windows
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class HostProbe(Probe):
    name = "host"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        # Kept open: re-reading with pread costs a third of open/read/close (~100 us in a training process).
        try:
            self.statm: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self.statm = None
        return {"host_memory_bytes": host_memory_bytes()}

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        if step >= RSS_DENSE_STEPS and step % RSS_EVERY:
            return {"rss_bytes": None, "rss_shared_bytes": None, "heap_free_bytes": None}
        values: dict[str, Any] = {"heap_free_bytes": last_free[0]}
        if self.statm is not None:
            # the file-backed share tells a memory-mapped dataset read for the first time from a leak
            values["rss_bytes"], values["rss_shared_bytes"] = statm_resident(self.statm)
        elif (rss := rss_bytes()) is not None:
            values["rss_bytes"] = rss
        return values

    def stop(self) -> None:
        statm = getattr(self, "statm", None)
        if statm is not None:
            os.close(statm)
            self.statm = None
