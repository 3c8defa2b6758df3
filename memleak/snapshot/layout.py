"""Which snapshot layout the unpickled data is in, checked before any table is built: a
wrong file is named as such (`NotASnapshot`) instead of failing deep inside pandas."""

from __future__ import annotations

from typing import Any


class NotASnapshot(ValueError):
    """The data is not in any snapshot layout memleak knows; the message says what is wrong."""


def read_layout(data: Any) -> tuple[list, list, dict]:
    """(segments, device_traces, allocator_settings) from any snapshot layout."""
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
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or "total_size" not in seg or not isinstance(seg.get("blocks"), list):
            raise NotASnapshot(f"segment {i} is not a dict with 'total_size' and a list of 'blocks'")
        for j, b in enumerate(seg["blocks"]):
            if not isinstance(b, dict) or "size" not in b or "state" not in b:
                raise NotASnapshot(f"block {j} of segment {i} is not a dict with 'size' and 'state'")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise NotASnapshot("'device_traces' is not a list of lists (one per device)")
    for dev, entries in enumerate(traces):
        if not all(isinstance(e, dict) for e in entries):
            raise NotASnapshot(f"an entry of device_traces[{dev}] is not a dict")
    return segments, traces, settings if isinstance(settings, dict) else {}
