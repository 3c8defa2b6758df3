"""Run-file names: a new run never destroys a file. It goes beside an earlier run under a
numbered name (run.jsonl, run-2.jsonl, run-3.jsonl, ...), each file is created exclusively
(two writers never share one) and locked while written; a path held by a file that is no
memleak run is refused. Loading a folder of several runs picks the newest."""

from __future__ import annotations

import itertools
import json
import logging
import re
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..schema import HEADER, STEP

try:
    import fcntl
except ImportError:  # Windows: exclusive creation alone keeps writers apart
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("memleak")

_NUMBER = re.compile(r"-([1-9][0-9]*)$")  # the "-2" of "run-2"


def numbered(path: Path, n: int) -> Path:
    """`path` with number `n`: run.jsonl for 1, run-2.jsonl for 2, and so on."""
    return path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")


def run_number(path: Path) -> int:
    """The number a run file's name carries: 2 for run-2.jsonl (and run-rank0-of2-2.jsonl), else 1."""
    m = _NUMBER.search(path.stem)
    return int(m.group(1)) if m and int(m.group(1)) >= 2 else 1


def free_path(path: Path) -> Path:
    """`path`, or the first numbered name beside it that no file holds yet (for files that
    are not run files, such as snapshots: never written over)."""
    for n in itertools.count(1):
        if not (candidate := numbered(path, n)).exists():
            return candidate
    raise AssertionError("unreachable")  # itertools.count never ends


def read_header(path: Path) -> dict[str, Any] | None:
    """The header of the memleak run file at `path`; None when it is no run file (or unreadable)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 20)
        rec = json.loads(first)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("type") == HEADER else None


def create_run_file(path: Path, overwrite: bool = False) -> tuple[Path, Any]:
    """Open a new run file at `path`, or beside it under the first free number, as an
    unbuffered binary file locked for this writer. With `overwrite`, an earlier memleak run
    at `path` is replaced (unless another writer holds it). Returns (the path used, the file).

    Raises UsageError when `path` (or its folder) is taken by something that is no memleak
    run, before anything is written; OSError when the folder cannot be written.
    """
    _refuse_foreign(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if overwrite:
        fh = _reopen(path)
        if fh is not None:
            return path, fh
    for n in itertools.count(1):
        candidate = numbered(path, n)
        try:
            fh = open(candidate, "xb", buffering=0)  # exclusive: race-free against other writers
        except FileExistsError:
            continue
        if not _lock(fh):  # an overwrite=True writer took it between our create and lock
            fh.close()
            continue
        if n > 1:
            log.warning(
                "memleak: %s holds an earlier run; this run is recorded in %s (overwrite=True replaces it)",
                path,
                candidate,
            )
        return candidate, fh
    raise AssertionError("unreachable")  # itertools.count never ends


def _refuse_foreign(path: Path) -> None:
    """UsageError when the run file's folder is a file, or its name is taken by no memleak run."""
    if path.parent.exists() and not path.parent.is_dir():
        raise UsageError(f"out={str(path.parent)!r} is a file, not a folder: pass a folder, or a new .jsonl file")
    if path.is_dir():
        raise UsageError(f"out={str(path)!r} is a folder: name a .jsonl file, or pass the folder itself")
    # an empty file may be a run another writer has just created (its header comes next)
    if path.exists() and path.stat().st_size and read_header(path) is None:
        raise UsageError(
            f"{path} exists and is not a memleak run file; memleak never overwrites it: "
            "choose another out= (a new folder, or a new .jsonl file)"
        )


def _reopen(path: Path) -> Any:
    """The memleak run at `path`, locked and emptied for a new run; None when there is none
    or another writer is recording into it."""
    try:
        fh = open(path, "r+b", buffering=0)
    except FileNotFoundError:
        return None
    if not _lock(fh):
        fh.close()
        log.warning("memleak: another process is recording into %s; this run goes beside it", path)
        return None
    fh.truncate(0)
    return fh


def _lock(fh: Any) -> bool:
    """Take an exclusive lock on the open file for as long as it stays open; False when
    another writer holds it. One call at open, none per step."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks (some NFS mounts): exclusive creation still holds
        return True
    return True


def newest_run(files: list[Path]) -> tuple[list[Path], str | None]:
    """Of a folder's run files, those of the newest run (one file, or one per rank), and a
    note saying so when the folder holds several runs (None when it holds one)."""
    names = {f.name for f in files}
    runs: dict[int, list[Path]] = {}
    for f in files:
        n = run_number(f)
        # numbering starts at the first run's name, which sits beside: rank-1.jsonl and
        # rank-2.jsonl without a rank.jsonl are one run's per-rank files
        if n > 1 and f"{f.stem[: -len(str(n)) - 1]}{f.suffix}" not in names:
            n = 1
        runs.setdefault(n, []).append(f)
    if len(runs) == 1:
        return files, None

    def written(n: int) -> tuple[int, int]:
        return max(f.stat().st_mtime_ns for f in runs[n]), n

    order = sorted(runs, key=written)
    newest = runs[order[-1]]
    firsts = [runs[n][0].name for n in order]
    shown = ", ".join(firsts[-6:]) + (f" and {len(firsts) - 6} older" if len(firsts) > 6 else "")
    note = (
        f"the folder holds {len(runs)} runs ({shown}); this is the newest, {newest[0].name}; "
        "load a run file to read another"
    )
    return newest, note


def second_writer(n: int, rec: dict, last: dict[str, Any]) -> str | None:
    """Why record `rec` (line `n`) cannot follow the records before it as one writer wrote
    them (a second header, a step number going back), or None when it can."""
    kind = rec.get("type")
    step, prev = rec.get("step"), last.get("step")
    if kind == HEADER:
        why = "a second header"
    elif kind == STEP and _number(step) and _number(prev) and step < prev:  # type: ignore[operator]
        why = f"step {step} after step {prev}"
    else:
        return None
    return f"line {n} holds {why}: two writers mixed their records in this file (one out= for two runs?)"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
