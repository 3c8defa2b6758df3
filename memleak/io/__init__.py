"""The only place memleak touches files: run files (write, read, per-rank folders), Parquet
export, PyTorch snapshot pickles, and `load` for any of them.

Names are imported on first use: the recorder needs only the writer, and reading (pandas,
pickles, Parquet) should cost a training process nothing until something is read."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .codec import RUN_SUFFIX
    from .loading import load
    from .parquet import read_parquet, to_parquet
    from .ranks import load_ranks
    from .reader import read_run_file, run_from_records
    from .unpickle import diff, load_snapshot
    from .writer import RecordSink, RunWriter

_WHERE = {
    "RUN_SUFFIX": "codec",
    "RecordSink": "writer",
    "RunWriter": "writer",
    "diff": "unpickle",
    "load": "loading",
    "load_ranks": "ranks",
    "load_snapshot": "unpickle",
    "read_parquet": "parquet",
    "read_run_file": "reader",
    "run_from_records": "reader",
    "to_parquet": "parquet",
}
__all__ = [
    "RUN_SUFFIX",
    "RecordSink",
    "RunWriter",
    "diff",
    "load",
    "load_ranks",
    "load_snapshot",
    "read_parquet",
    "read_run_file",
    "run_from_records",
    "to_parquet",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
