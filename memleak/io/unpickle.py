"""PyTorch memory snapshot pickles, read with an unpickler that builds plain containers only,
so a hostile file cannot run code, and a bounded one: a corrupt length field gives one clear
error, not a crash."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RunFileError
from ..snapshot import NotASnapshot, Snapshot

if TYPE_CHECKING:
    import pandas as pd


class _Refused(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle opcodes build by themselves: dict, list, tuple, str,
    bytes, int, float, bool, None. Snapshots need nothing else (segment_pool_id is a
    tuple), so every global is refused: without one no callable exists to run."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


# What unpickling may take beyond the process's current size: Python objects take about
# 12x the bytes of their pickle; a 9-byte pickle whose memo index is 2**28 asks for 4 GiB.
HEADROOM_BYTES = 1 << 30
BYTES_PER_PICKLE_BYTE = 40


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def bounded_memory(file_size: int) -> Iterator[None]:
    """Cap the address space while a pickle loads, relative to its size, so that a corrupt
    length or memo index fails as MemoryError instead of taking the machine's memory.
    pickle's C unpickler offers no hook on its opcodes; the cap (Linux) is what bounds it."""
    try:
        import resource
    except ImportError:  # not on this platform: unbounded, as pickle is
        yield
        return
    current = _address_space()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = None if current is None else current + HEADROOM_BYTES + BYTES_PER_PICKLE_BYTE * file_size
    if cap is None or (soft != resource.RLIM_INFINITY and soft <= cap):
        yield
        return
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# The rows (segments, blocks, trace entries) a snapshot pickle of a given size may list. A real
# block costs at least ~20 bytes of pickle (a dict of size and state, with address, requested
# size and frames since torch 2.1: each key a 2-byte memo reference, each size a 5- to 9-byte
# int), a trace entry more; but a block the pickle already built costs 2 bytes (a memo
# reference), so an 18 KB file can list one block 9 million times (3 GB of tables). 8 bytes a
# row stays below every real snapshot (no real file is refused) and bounds what a file can
# ask for to a small multiple of its size; the floor keeps small files from being judged
# on a few bytes of overhead.
MIN_ROWS = 100_000
PICKLE_BYTES_PER_ROW = 8


def max_snapshot_rows(file_size: int) -> int:
    """The most segments, blocks and trace entries a snapshot pickle of this size may list."""
    return max(MIN_ROWS, file_size // PICKLE_BYTES_PER_ROW)


def _unpickle(path: Path) -> tuple[Any, int]:
    try:
        size = path.stat().st_size
        if size == 0:
            raise RunFileError(path, "the file is empty: no snapshot was written to it")
        with open(path, "rb") as fh, bounded_memory(size):
            return _PlainUnpickler(fh).load(), size
    except _Refused as e:
        raise RunFileError(
            path,
            f"memleak refuses to build {e.name}: snapshot pickles hold only plain containers "
            "(dicts, lists, strings, numbers), so this file is not a PyTorch memory snapshot; "
            "nothing in it was run",
        ) from None
    except OSError as e:
        raise RunFileError(path, f"cannot read the file: {e.strerror or e}") from None
    except EOFError:
        raise RunFileError(
            path,
            "the pickle ends too early: the file is truncated (was the process killed while dumping the snapshot?)",
        ) from None
    except MemoryError:  # a corrupt length field asks for an absurd buffer
        raise RunFileError(
            path,
            "not a readable pickle: it asks for far more memory than a snapshot of its size needs "
            "(the file is corrupt, or built to exhaust memory)",
        ) from None
    except (
        pickle.UnpicklingError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        OverflowError,
        UnicodeDecodeError,
    ) as e:
        what = "truncated" if "truncated" in str(e) else "corrupt"
        raise RunFileError(path, f"not a readable pickle, the file is {what} ({e})") from None


def load_snapshot(path: str | os.PathLike) -> Snapshot:
    """Read a pickle written by ``torch.cuda.memory._dump_snapshot`` (any version) or a
    pickled ``torch.cuda.memory_snapshot()`` list. Raises RunFileError naming the file
    when it is unreadable, hostile or not a snapshot."""
    p = Path(path)
    data, size = _unpickle(p)
    try:
        return Snapshot.from_data(data, path=str(p), max_rows=max_snapshot_rows(size))
    except NotASnapshot as e:
        raise RunFileError(p, f"this pickle is not a PyTorch memory snapshot: {e.problem}") from None


def as_snapshot(s: Snapshot | str | os.PathLike) -> Snapshot:
    """A Snapshot as it is, or read from its file."""
    return s if isinstance(s, Snapshot) else load_snapshot(s)


def diff(a: Snapshot | str | os.PathLike, b: Snapshot | str | os.PathLike) -> pd.DataFrame:
    """`memleak.diff`: allocations alive in snapshot `b` that were not alive in `a`, grouped by
    top user frame (see `memleak.snapshot.diff`); each may be a Snapshot or a pickle's path."""
    from ..snapshot import diff as diff_snapshots

    return diff_snapshots(as_snapshot(a), as_snapshot(b))
