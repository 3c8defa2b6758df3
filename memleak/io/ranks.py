"""Per-rank run files (``run-rank{r}-of{w}.jsonl``) read and merged into a `MultiRun`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import RunFileError, UsageError
from ..run import MultiRun, Run
from .reader import read_run_file
from .validate import MAX_WORLD

_RANK_NAME = re.compile(r"rank(\d+)-of(\d+)")


def _rank_of(path: Path, meta: dict[str, Any]) -> tuple[int | None, int | None]:
    """The rank and world size from the header (checked when it was read), else from the
    file's name (``rank{r}-of{w}``), which must name as few ranks as a header may."""
    rank, world = meta.get("rank"), meta.get("world_size")
    m = _RANK_NAME.search(path.name)
    if m and (rank is None or world is None):
        named_rank, named_world = (int(g) if len(g) < 8 else MAX_WORLD for g in m.groups())
        if not (named_rank < MAX_WORLD and 1 <= named_world < MAX_WORLD):
            raise RunFileError(path, f"the file's name gives a rank or world size above {MAX_WORLD - 1}")
        rank = named_rank if rank is None else rank
        world = named_world if world is None else world
    return rank, world


def load_ranks(files: Iterable[str | Path], errors: str = "raise") -> MultiRun:
    """Read one run file per rank and merge them. The rank comes from each header
    (or the ``rank{r}-of{w}`` in the file name); two files of the same rank are an error."""
    paths = [Path(f) for f in files]
    if not paths:
        raise UsageError("load_ranks needs at least one run file")
    folder = paths[0].parent if all(f.parent == paths[0].parent for f in paths) else None
    ranks: dict[int, Run] = {}
    by_rank: dict[int, Path] = {}
    worlds: set[int] = set()
    for f in paths:
        run = read_run_file(f, errors=errors)
        rank, world = _rank_of(f, run.meta)
        if rank is None:
            raise RunFileError(
                f, "the header names no rank; a folder with several run files must hold one file per rank"
            )
        if rank in by_rank:
            raise RunFileError(
                folder or f,
                f"two run files for rank {rank}: {by_rank[rank].name} and {f.name}; "
                "the folder holds several runs: pass one run file, or one folder per run",
            )
        if world is not None:
            worlds.add(world)
        ranks[rank] = run
        by_rank[rank] = f
    return MultiRun(
        dict(sorted(ranks.items())),
        path=str(folder) if folder else None,
        world_size=max(worlds) if worlds else len(ranks),
        inconsistent_world=len(worlds) > 1,
    )
