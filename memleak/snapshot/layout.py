"""Which snapshot layout the unpickled data is in, checked before any table is built: a
wrong file is named as such (`NotASnapshot`) instead of failing deep inside pandas, and one
that lists far more entries than its file can hold is refused before they are built."""

from __future__ import annotations

import os
from typing import Any

from ..errors import RunFileError


class NotASnapshot(RunFileError, ValueError):
    """The data is not a snapshot memleak can read; the message says what is wrong (and names
    the file, when the data came from one). A `RunFileError`, so the command line prints it as
    one line; a ValueError, as it always was."""

    def __init__(self, problem: str, path: str | os.PathLike | None = None):
        super().__init__(path, problem)


def read_layout(data: Any, max_rows: int | None = None) -> tuple[list, list, dict]:
    """(segments, device_traces, allocator_settings) from any snapshot layout, checked for
    type down to each block and trace entry (their fields are checked as tables are built). With
    `max_rows`, data listing more segments, blocks and trace entries than that is refused
    (counted with len() only, before any entry is looked at)."""
    segments, traces, settings = _parts(data)
    if max_rows is not None:
        _check_rows(segments, traces, max_rows)
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or "total_size" not in seg or not isinstance(seg.get("blocks"), list):
            raise NotASnapshot(f"segment {i} is not a dict with 'total_size' and a list of 'blocks'")
        for j, b in enumerate(seg["blocks"]):
            if not isinstance(b, dict) or "size" not in b or "state" not in b:
                raise NotASnapshot(f"block {j} of segment {i} is not a dict with 'size' and 'state'")
    for dev, entries in enumerate(traces):
        if not isinstance(entries, list):
            raise NotASnapshot("'device_traces' is not a list of lists (one per device)")
        if not all(isinstance(e, dict) for e in entries):
            raise NotASnapshot(f"an entry of device_traces[{dev}] is not a dict")
    return segments, traces, settings


def _parts(data: Any) -> tuple[list, list, dict]:
    """The segments, the device traces and the settings, as the layout places them: the
    first two checked to be lists, their entries not yet looked at."""
    traces: Any
    settings: Any
    if isinstance(data, list):  # pickled torch.cuda.memory_snapshot(): segments only
        segments, traces, settings = data, [], {}
    elif isinstance(data, dict):
        if "segments" not in data:
            keys = ", ".join(sorted(map(str, data))[:8]) or "none"
            raise NotASnapshot(f"the dict has no 'segments' key (its keys: {keys})")
        segments, traces = data["segments"], data.get("device_traces") or []
        settings = data.get("allocator_settings") or {}
    else:
        raise NotASnapshot(
            f"it holds a {type(data).__name__}, not a dict with 'segments' and 'device_traces' or a list of segments"
        )
    if not isinstance(segments, list):
        raise NotASnapshot(f"'segments' is a {type(segments).__name__}, not a list")
    if not isinstance(traces, list):
        raise NotASnapshot("'device_traces' is not a list of lists (one per device)")
    return segments, traces, settings if isinstance(settings, dict) else {}


def _check_rows(segments: list, traces: list, max_rows: int) -> None:
    """Refuse data that lists more than `max_rows` segments, blocks and trace entries. A
    pickle refers to an object already built in 2 bytes (its memo), so a small file can list
    the same block millions of times; each would become a row of the tables."""
    n = len(segments) + len(traces)
    if n <= max_rows:  # the segments are walked only once their number is known to be bounded
        blocks = (seg.get("blocks") for seg in segments if isinstance(seg, dict))
        n += sum(len(b) for b in blocks if isinstance(b, list))
        n += sum(len(t) for t in traces if isinstance(t, list))
    if n > max_rows:
        raise NotASnapshot(
            f"it lists {n:,} segments, blocks and trace entries, more than the {max_rows:,} a pickle of "
            "its size holds without repeating the same entries over and over (the file is corrupt, "
            "or built to exhaust memory)"
        )
