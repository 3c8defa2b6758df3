"""`memleak.load`: open whatever memleak reads, a run file, a folder of them, or a
PyTorch memory snapshot pickle."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import RunFileError
from ..run import MultiRun, Run
from ..snapshot import Snapshot
from .codec import PICKLE_SUFFIXES, RUN_SUFFIX
from .ranks import load_ranks
from .reader import read_run_file
from .runfiles import newest_run
from .unpickle import load_snapshot


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


def load(path: str | os.PathLike, errors: str = "raise") -> Run | MultiRun | Snapshot:
    """Open a recorded run (a run file, or a folder holding one) or a PyTorch memory snapshot pickle.

    Returns a `Run`, or a `Snapshot` for a pickle written by
    ``torch.cuda.memory._dump_snapshot``. A folder with one run file per rank
    is merged into a multi-rank run. A folder holding several runs (run.jsonl,
    run-2.jsonl, ...) gives the newest, with a problem line that says so.
    """
    p = Path(path)
    try:
        p.stat()
    except FileNotFoundError:
        what = "a symbolic link to nothing" if p.is_symlink() else "no such file or folder"
        raise RunFileError(p, what) from None
    except OSError as e:  # a symlink loop, a name too long, no permission
        raise RunFileError(p, f"cannot open it: {e.strerror or e}") from None
    if p.is_dir():
        files = find_run_files(p)
        if not files:
            raise RunFileError(
                p, f"the folder holds no run file (*{RUN_SUFFIX}); pass the out= folder of a tracked run"
            )
        files, note = newest_run(files)
        run = read_run_file(files[0], errors=errors) if len(files) == 1 else load_ranks(files, errors=errors)
        if note is not None:
            run.problems.append(note)
        return run
    if is_pickle(p):
        return load_snapshot(p)
    return read_run_file(p, errors=errors)
