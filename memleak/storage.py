"""Writing and reading run files (JSON Lines), and `load` for any input memleak reads.

A run file is plain text: a header record, then records appended and flushed
one by one, so a run killed mid-way (an OOM, kill -9) loads up to its last
whole record. Step records are delta-encoded: a key absent from a step record
kept its previous value. No pickle is ever written.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import IO, Any, Iterable

import pandas as pd

from .errors import RunFileError, UsageError
from .run import Run
from .schema import EVENT, HEADER, SCHEMA_VERSION, STEP

RUN_SUFFIX = ".jsonl"
PICKLE_SUFFIXES = (".pickle", ".pkl")


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RecordSink:
    """Keeps records in memory; the base of RunWriter. `records` is what a Run is built from."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self._last_step: dict[str, Any] = {}

    def header(self, meta: dict[str, Any]) -> None:
        self._emit({"type": HEADER, "schema": SCHEMA_VERSION, **meta})

    def step(self, values: dict[str, Any]) -> None:
        """One iteration's values; only those that changed since the last step are written."""
        values = {k: _clean(v) for k, v in values.items()}
        delta = {k: v for k, v in values.items() if k == "step" or self._last_step.get(k, _MISSING) != v}
        self._last_step.update(values)
        self._emit({"type": STEP, **delta})

    def record(self, type_: str, body: dict[str, Any]) -> None:
        self._emit({"type": type_, **body})

    def event(self, name: str, **body: Any) -> None:
        self.record(EVENT, {"event": name, **body})

    def _emit(self, rec: dict) -> None:
        self.records.append(rec)

    def close(self) -> None:
        pass


_MISSING = object()


class RunWriter(RecordSink):
    """Appends each record to a JSON Lines file and flushes it at once."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(self.path, "w", encoding="utf-8")

    def _emit(self, rec: dict) -> None:
        super()._emit(rec)
        if self._fh is None:
            return
        self._fh.write(json.dumps(rec, separators=(",", ":"), default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


# ---------------------------------------------------------------- reading

def run_from_records(records: Iterable[dict], path: str | None = None, truncated: bool = False,
                     problems: list[str] | None = None) -> Run:
    """Build a Run from records (as written by a RecordSink). Used for files and live runs alike."""
    meta: dict[str, Any] | None = None
    rows: list[dict] = []
    events: list[dict] = []
    others: dict[str, list[dict]] = {}
    last: dict[str, Any] = {}
    for rec in records:
        kind = rec.get("type")
        body = {k: v for k, v in rec.items() if k != "type"}
        if kind == HEADER:
            meta = body
        elif kind == STEP:
            last = {**last, **body}
            rows.append(last)
        elif kind == EVENT:
            events.append(body)
        else:
            others.setdefault(str(kind), []).append(body)
    if meta is None:
        raise RunFileError(path, "no header record: this is not a memleak run file")
    steps = pd.DataFrame(rows)
    if steps.empty:
        steps = pd.DataFrame({"step": pd.Series(dtype="int64"), "time": pd.Series(dtype="float64")})
    return Run(meta, steps, events, others, path=path, truncated=truncated, problems=problems)


def read_run_file(path: str | os.PathLike, errors: str = "raise") -> Run:
    """Read one run file. A last line cut short (the process was killed) is dropped and
    flagged as `run.truncated`; a broken line elsewhere raises, unless errors="skip"."""
    if errors not in ("raise", "skip"):
        raise UsageError(f"errors must be 'raise' or 'skip', not {errors!r}")
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RunFileError(path, f"cannot read the file: {e.strerror or e}") from None
    if not data.strip():
        raise RunFileError(path, "the file is empty: no run was recorded in it")
    lines = data.split(b"\n")
    ends_cleanly = lines[-1] == b""
    if ends_cleanly:
        lines.pop()
    records: list[dict] = []
    problems: list[str] = []
    truncated = False
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            if n == len(lines) and not ends_cleanly and records:
                truncated = True
                problems.append(f"the file was cut short: line {n} is incomplete; "
                                f"the {len(records)} whole records before it were read")
                break
            if n == 1:
                raise RunFileError(path, "this is not a memleak run file (the first line is not a JSON record)") from None
            msg = f"line {n} is not a valid record ({e})"
            if errors == "raise":
                raise RunFileError(path, msg + "; memleak.load(path, errors='skip') reads around it") from None
            problems.append(msg + "; skipped")
            continue
        if n == 1 or not records:
            _check_header(path, rec)
        records.append(rec)
    return run_from_records(records, path=str(path), truncated=truncated, problems=problems)


def _check_header(path: Path, rec: dict) -> None:
    if rec.get("type") != HEADER:
        raise RunFileError(path, "the first record is not a memleak header: this is not a memleak run file")
    version = rec.get("schema")
    if version != SCHEMA_VERSION:
        raise RunFileError(path, f"schema version {version!r} is not supported: this memleak reads version "
                                 f"{SCHEMA_VERSION}; use the memleak version that wrote the file")


def find_run_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(f"*{RUN_SUFFIX}") if p.is_file())


def is_pickle(path: Path) -> bool:
    if path.suffix.lower() in PICKLE_SUFFIXES:
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(1) == b"\x80"  # pickle protocol 2+ opcode
    except OSError:
        return False


def load(path: str | os.PathLike, errors: str = "raise"):
    """Open a recorded run (a run file, or a folder holding one) or a PyTorch memory snapshot pickle.

    Returns a `Run`, or a `Snapshot` for a pickle written by
    ``torch.cuda.memory._dump_snapshot``. A folder with one run file per rank
    is merged into a multi-rank run.
    """
    p = Path(path)
    if not p.exists():
        raise RunFileError(p, "no such file or folder")
    if p.is_dir():
        files = find_run_files(p)
        if not files:
            raise RunFileError(p, f"the folder holds no run file (*{RUN_SUFFIX}); pass the out= folder of a tracked run")
        if len(files) == 1:
            return read_run_file(files[0], errors=errors)
        from .distributed import load_ranks  # a folder of per-rank files
        return load_ranks(files, errors=errors)
    if is_pickle(p):
        from .snapshot import load_snapshot
        return load_snapshot(p)
    return read_run_file(p, errors=errors)
