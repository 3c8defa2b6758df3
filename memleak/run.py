"""Run and MultiRun: recorded runs as pandas tables. Detectors see only these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from .collector import collector_paused
from .errors import UsageError
from .records import BirthsRecord, HoldersRecord, ModulesRecord, SavedRecord
from .schema import CHECK_EVENT, DETAIL_EVENT, HOST_COLUMNS, MEMORY_COLUMNS, OWN_COLUMN, Boundary, Level, RecordType
from .units import ranks_text

T = TypeVar("T")


def step_axis(steps: pd.DataFrame) -> np.ndarray:
    """The step column as floats when it is complete, else the row number."""
    if "step" in steps:
        s = np.asarray(steps["step"], dtype=float)
        if np.isfinite(s).all():
            return s
    return np.arange(len(steps), dtype=float)


#: Boundaries weaker than the loop's own that may cut its first iteration into parts.
PARTS = (Boundary.FORWARD.value, Boundary.BACKWARD.value)


def first_iteration_end(run: Run) -> float:
    """The step that ended the loop's first iteration where the steps before it were parts of it:
    iterations were ended at each call of the model (or backward pass) until the loop's first
    ``tracker.step()`` (a server that calls the model 64 times a request batch), which ended it. 0
    otherwise. Those parts would read as steps, with a fraction of a step's growth each."""
    kinds = [(e.get("kind"), e.get("step")) for e in run.events if e.get("event") == "boundary"][:2]
    if len(kinds) == 2 and kinds[0][0] in PARTS and kinds[1][0] == Boundary.CALL.value:
        return float(kinds[1][1] or 0)
    return 0.0


def own_adjusted(steps: pd.DataFrame, column: str, y: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """`y` (values of `column` at row positions `rows`, else at every row) less memleak's own heap
    bytes (`memleak_bytes`), for host series; the detectors judge them so, the pictures draw them so."""
    if column not in HOST_COLUMNS or OWN_COLUMN not in steps:
        return y
    own = np.asarray(steps[OWN_COLUMN], dtype=float)
    if rows is not None:
        own = own[rows]
    own = np.where(np.isfinite(own), own, 0.0)
    return _without_own_imports(y - own, own) if column == "rss_bytes" else y - own


#: A rise of memleak's own heap bytes this large between two reads is an import of its own
#: (the live check's first test brings in numpy's and scipy's modules and libraries mid-run).
OWN_IMPORT_BYTES = 1 << 20


def _without_own_imports(y: np.ndarray, own: np.ndarray) -> np.ndarray:
    """RSS less the rest of the rise between two reads where memleak imported modules: their
    shared libraries and Python objects take RSS far beyond the heap bytes counted as its own
    (+138 MiB of RSS for 33 MiB of heap, in a fresh process at the first live check)."""
    out = np.array(y, dtype=float)
    seen = np.flatnonzero(np.isfinite(out))
    rise = np.diff(out[seen])
    imported = (np.diff(own[seen]) >= OWN_IMPORT_BYTES) & (rise > 0)
    out[seen[1:]] -= np.cumsum(np.where(imported, rise, 0.0))  # each such rise off every later read
    return out


def _build_all(raw: list[dict], build: Callable[[dict], T]) -> tuple[T, ...]:
    """`build` of each record, by step. The cyclic garbage collector is paused meanwhile: a long
    run has hundreds of thousands of rows, and each collection their making triggers would only
    rescan the loaded run (it halves the time)."""
    with collector_paused():
        return tuple([build(r) for r in sorted(raw, key=lambda r: r["step"])])


class Run:
    """A recorded run.

    - ``meta``: the header (versions, device, host, command line, ...).
    - ``steps``: one row per iteration: ``step``, ``time`` and one column per metric
      (see ``memleak.schema.STEP_COLUMNS``).
    - ``events``: one-off records (an OOM, a skipped probe, a snapshot dump).
    - ``records``: other record types by name (census groups, module deltas...),
      each a list of dicts; ``table(name)`` gives one as a DataFrame.
    - ``holders``, ``births``, ``saved``, ``module_records``: the culprit probes' detail
      records as the dataclasses of ``memleak.records``, by step (built once, on first use).
    - ``truncated``: the file ended in the middle of a record (the process was
      killed); every whole record before it is here.
    """

    def __init__(
        self,
        meta: dict[str, Any],
        steps: pd.DataFrame,
        events: list[dict] | None = None,
        records: dict[str, list[dict]] | None = None,
        path: str | None = None,
        truncated: bool = False,
        problems: list[str] | None = None,
    ):
        self.meta = meta
        self.steps = steps
        self.events = events or []
        self.records = records or {}
        self.path = path
        self.truncated = truncated
        self.problems = problems or []
        # record type -> (the list of dicts it was built from, its length then, its dataclasses by step)
        self._typed_cache: dict[RecordType, tuple[list, int, tuple]] = {}

    def table(self, name: str) -> pd.DataFrame:
        """Records of one type as a DataFrame (empty when there are none)."""
        return pd.DataFrame(self.records.get(name, []))

    def _typed(self, kind: RecordType, build: Callable[[dict], T]) -> list[T]:
        """The records of one type as dataclasses, by step: built on first use, again only when
        ``records`` got another list of that type or the list grew."""
        raw = self.records.get(kind.value, [])
        hit = self._typed_cache.get(kind)
        if hit is None or hit[0] is not raw or hit[1] != len(raw):
            hit = self._typed_cache[kind] = (raw, len(raw), _build_all(raw, build))
        return list(hit[2])

    @property
    def holders(self) -> list[HoldersRecord]:
        """The reference walks (holders of tensors), by step."""
        return self._typed(RecordType.HOLDERS, HoldersRecord.from_dict)

    @property
    def births(self) -> list[BirthsRecord]:
        """Surviving tensors by creation site, by step."""
        return self._typed(RecordType.BIRTHS, BirthsRecord.from_dict)

    @property
    def saved(self) -> list[SavedRecord]:
        """Tensors saved for backward that outlive their step, by step."""
        return self._typed(RecordType.SAVED, SavedRecord.from_dict)

    @property
    def module_records(self) -> list[ModulesRecord]:
        """Per-module memory deltas, by step."""
        return self._typed(RecordType.MODULES, ModulesRecord.from_dict)

    def detail_spans(self) -> list[tuple[int, int, str, str]]:
        """Which steps had which level: (first step, last step, level, why) in order. A fixed level
        is one span; the auto level's `detail` events split its run into counters and full spans."""
        if not len(self.steps):
            return []
        last = int(self.steps["step"].iloc[-1]) if "step" in self.steps else len(self.steps) - 1
        level = str(self.meta.get("level", "?"))
        changes = [e for e in self.events if e.get("event") == DETAIL_EVENT and isinstance(e.get("step"), int)]
        if level != Level.AUTO or not changes:
            return [(0, last, level, "fixed")]
        spans: list[tuple[int, int, str, str]] = []
        for i, e in enumerate(changes):
            end = changes[i + 1]["step"] - 1 if i + 1 < len(changes) else last
            if e["step"] <= min(end, last):
                spans.append((e["step"], min(end, last), str(e.get("level")), str(e.get("reason", ""))))
        return spans

    def check_steps(self) -> list[int]:
        """The steps the auto level's checks walked the holders at (between its windows)."""
        return [e["step"] for e in self.events if e.get("event") == CHECK_EVENT and isinstance(e.get("step"), int)]

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

    def memory_level(self) -> tuple[str | None, float | None, float | None]:
        """(memory column, memory at the end: median of the last tenth of the steps, peak)."""
        col = self.memory_column()
        if col is None:
            return None, None, None
        s = self.steps[col].dropna()
        if s.empty:
            return col, None, None
        tail = s.iloc[-max(1, len(s) // 10) :]
        return col, float(tail.median()), float(s.max())

    @property
    def device(self) -> str:
        """The tracked device, as torch names it ("cuda:0", "cpu")."""
        return str(self.meta.get("device", "cpu"))

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        cut = ", truncated" if self.truncated else ""
        return f"<memleak.Run {self.path or '(in memory)'}: {len(self.steps)} steps on {self.device}{cut}>"


#: Header fields that differ from rank to rank; the others are shared and go to MultiRun.meta.
_PER_RANK_META = ("rank", "pid", "device", "start_time", "local_rank")


class MultiRun:
    """The runs of every rank of one distributed job.

    - ``ranks``: ``{rank: Run}``, by rank.
    - ``steps``: every rank's steps in one DataFrame, with a ``rank`` column first.
    - ``meta``: the header fields all ranks share, plus ``world_size`` and ``ranks``.
    - ``events``: every rank's events, each with its ``rank``.
    """

    def __init__(
        self,
        ranks: dict[int, Run],
        path: str | None = None,
        world_size: int | None = None,
        inconsistent_world: bool = False,
    ):
        if not ranks:
            raise UsageError("a MultiRun needs at least one rank")
        self.ranks = ranks
        self.path = path
        self.world_size = world_size or len(ranks)
        self._steps: pd.DataFrame | None = None
        metas = [r.meta for r in ranks.values()]
        shared = {
            k: v
            for k, v in metas[0].items()
            if k not in _PER_RANK_META and all(m.get(k, object()) == v for m in metas[1:])
        }
        shared.update(world_size=self.world_size, ranks=list(ranks))
        devices = sorted({str(m.get("device")) for m in metas})
        shared["device"] = devices[0] if len(devices) == 1 else ", ".join(devices)
        self.meta = shared
        self.problems: list[str] = []
        for rank, run in ranks.items():
            self.problems += [f"rank {rank}: {p}" for p in run.problems]
        missing = sorted(set(range(self.world_size)) - set(ranks))
        if missing:
            self.problems.append(
                f"no run file for rank{'s' if len(missing) > 1 else ''} "
                f"{ranks_text(missing)} of the world size {self.world_size}"
            )
        if inconsistent_world:
            self.problems.append("the run files disagree on the world size: are they from the same job?")

    @property
    def steps(self) -> pd.DataFrame:
        """All ranks' steps, a ``rank`` column first (built on first use)."""
        if self._steps is None:
            parts = [run.steps.assign(rank=rank) for rank, run in self.ranks.items()]
            steps = pd.concat(parts, ignore_index=True, sort=False) if parts else pd.DataFrame()
            self._steps = steps[["rank", *[c for c in steps.columns if c != "rank"]]]
        return self._steps

    @property
    def events(self) -> list[dict]:
        """Every rank's events, each with its rank."""
        return [{"rank": rank, **e} for rank, run in self.ranks.items() for e in run.events]

    @property
    def truncated(self) -> bool:
        """Whether any rank's run file was cut short."""
        return any(run.truncated for run in self.ranks.values())

    @property
    def device(self) -> str:
        """The tracked device of the first rank."""
        return str(self.meta.get("device", "cpu"))

    @property
    def records(self) -> dict[str, list[dict]]:
        """Every rank's other records by type, each with its ``rank``."""
        out: dict[str, list[dict]] = {}
        for rank, run in self.ranks.items():
            for name, recs in run.records.items():
                out.setdefault(name, []).extend({"rank": rank, **r} for r in recs)
        return out

    def table(self, name: str) -> pd.DataFrame:
        """Records of one type from every rank as a DataFrame, with a ``rank`` column."""
        return pd.DataFrame(self.records.get(name, []))

    def memory_column(self) -> str | None:
        """The memory column every rank tracks best, when they agree."""
        cols = {run.memory_column() for run in self.ranks.values()}
        return cols.pop() if len(cols) == 1 else None

    def __getitem__(self, rank: int) -> Run:
        return self.ranks[rank]

    def __len__(self) -> int:
        return max((len(r) for r in self.ranks.values()), default=0)

    def __repr__(self) -> str:
        cut = ", truncated" if self.truncated else ""
        return (
            f"<memleak.MultiRun {self.path or '(in memory)'}: ranks {ranks_text(list(self.ranks))} "
            f"of {self.world_size}, {len(self)} steps{cut}>"
        )
