"""Run: one recorded run as pandas tables. Detectors see only this."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# Which column shows memory growth best, in order of preference. On an
# accelerator its allocator counts every tensor. Without one, the C heap's
# in-use bytes (glibc mallinfo2: CPU tensor storages are malloc'ed) are exact and
# cheap every step; the live-tensor census is exact but sampled; RSS is the last
# resort (it never shrinks after a free and counts Python objects too).
MEMORY_COLUMNS = ("allocated_bytes", "heap_bytes", "tensor_bytes", "rss_bytes")
HOST_COLUMNS = ("heap_bytes", "rss_bytes")


def step_axis(steps: pd.DataFrame) -> np.ndarray:
    """The step column as floats when it is complete, else the row number."""
    if "step" in steps:
        s = np.asarray(steps["step"], dtype=float)
        if np.isfinite(s).all():
            return s
    return np.arange(len(steps), dtype=float)


class Run:
    """A recorded run.

    - ``meta``: the header (versions, device, host, command line, ...).
    - ``steps``: one row per iteration: ``step``, ``time`` and one column per metric
      (see ``memleak.schema.STEP_COLUMNS``).
    - ``events``: one-off records (an OOM, a skipped probe, a snapshot dump).
    - ``records``: other record types by name (census groups, module deltas...),
      each a list of dicts; ``table(name)`` gives one as a DataFrame.
    - ``truncated``: the file ended in the middle of a record (the process was
      killed); every whole record before it is here.
    """

    def __init__(self, meta: dict[str, Any], steps: pd.DataFrame, events: list[dict] | None = None,
                 records: dict[str, list[dict]] | None = None, path: str | None = None,
                 truncated: bool = False, problems: list[str] | None = None):
        self.meta = meta
        self.steps = steps
        self.events = events or []
        self.records = records or {}
        self.path = path
        self.truncated = truncated
        self.problems = problems or []

    def table(self, name: str) -> pd.DataFrame:
        """Records of one type as a DataFrame (empty when there are none)."""
        return pd.DataFrame(self.records.get(name, []))

    def memory_column(self) -> str | None:
        """The column that tracks live memory best in this run, or None."""
        for col in MEMORY_COLUMNS:
            if col in self.steps and self.steps[col].notna().sum() >= 2 and self.steps[col].max() > 0:
                return col
        return None

    def host_column(self) -> str | None:
        """The column that tracks host (CPU) memory best, or None."""
        for col in HOST_COLUMNS:
            if col in self.steps and self.steps[col].notna().sum() >= 2:
                return col
        return None

    def capacity_bytes(self) -> float | None:
        """How much memory the run may use before it fails: a budget the user gave, else
        the device total (header, then steps), else host RAM for a CPU run."""
        for key in ("budget_bytes", "device_total_bytes"):
            if self.meta.get(key):
                return float(self.meta[key])
        if "device_total_bytes" in self.steps and self.steps["device_total_bytes"].notna().any():
            return float(self.steps["device_total_bytes"].dropna().iloc[-1])
        if self.device.startswith("cpu") and self.meta.get("host_memory_bytes"):
            return float(self.meta["host_memory_bytes"])
        return None

    @property
    def device(self) -> str:
        return str(self.meta.get("device", "cpu"))

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        cut = ", truncated" if self.truncated else ""
        return f"<memleak.Run {self.path or '(in memory)'}: {len(self.steps)} steps on {self.device}{cut}>"
