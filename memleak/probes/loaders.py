"""Which DataLoader a set of new worker processes belongs to, and what to call it.

Run once per new set of workers (at most once an epoch), never per step. The DataLoader is
looked for where a person would point at it: a variable (or an attribute of ``self``) in the
frames of the code that ended the step. A persistent loader names its workers' PIDs exactly
(``loader._iterator._workers``); otherwise the one loader in sight with that many workers is
taken; failing that, Python's garbage collector finds the iterator that owns the worker
processes (a scan of every object, up to three times: the last resort). Only names and numbers
are kept: never the loader, its dataset or its iterator.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import multiprocessing.process as mp_process
from dataclasses import dataclass
from typing import Any

from .frames import in_sight


@dataclass(frozen=True)
class LoaderInfo:
    """What the report says about one DataLoader whose workers were found."""

    name: str  # the variable that holds it (``loader``, ``self.train_loader``), or a description
    dataset: str  # the Dataset's class name
    dataset_len: int | None
    num_workers: int
    steps_per_epoch: int | None  # len(loader): batches per epoch, when the sampler has a length
    persistent: bool
    start_method: str | None  # fork, spawn, forkserver; None when the default was never fixed
    dataset_objects: int | None = None  # Python objects the Dataset holds; None: MAX_OBJECTS or more


def no_children() -> bool:
    """Whether this process started no multiprocessing child (nearly every step of most loops:
    one attribute read, where `child_pids` walks them)."""
    return not getattr(mp_process, "_children", None)


def child_pids() -> dict[int, Any]:
    """The processes this one started through multiprocessing that are running, by PID (the
    Process objects multiprocessing itself keeps; DataLoader workers are among them)."""
    out = {}
    for p in list(getattr(mp_process, "_children", ())):
        popen = getattr(p, "_popen", None)
        if popen is not None and getattr(popen, "returncode", None) is None:
            out[popen.pid] = p
    return out


def _is_loader(v: Any) -> bool:
    from torch.utils.data import DataLoader

    return isinstance(v, DataLoader) and getattr(v, "num_workers", 0) > 0


def loaders_in_sight(frame: Any) -> dict[int, tuple[str, Any]]:
    """DataLoaders with workers in sight of `frame` (see `in_sight`)."""
    return in_sight(frame, _is_loader)


def _worker_pids(it: Any) -> set[int]:
    return {w.pid for w in getattr(it, "_workers", ()) if getattr(w, "pid", None)}


def _iterators_owning(processes: list[Any]) -> list[Any]:
    """The DataLoader iterators whose `_workers` list holds one of `processes` (the gc scans)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter as Iter

    found: dict[int, Any] = {}
    lists = [r for r in gc.get_referrers(*processes) if isinstance(r, list)]
    if not lists:
        return []
    holders = gc.get_referrers(*lists)
    dicts = [h for h in holders if isinstance(h, dict)]
    owners = [h for h in holders if isinstance(h, Iter)]
    if dicts:
        owners += [o for o in gc.get_referrers(*dicts) if isinstance(o, Iter)]
    for o in owners:
        found[id(o)] = o
    return list(found.values())


def _start_method(loader_ctx: Any) -> str | None:
    if loader_ctx is None:
        return multiprocessing.get_start_method(allow_none=True)  # never fixes the default
    if isinstance(loader_ctx, str):
        return loader_ctx
    getter = getattr(loader_ctx, "get_start_method", None)
    return getter() if getter is not None else None


def _len(obj: Any) -> int | None:
    try:
        return int(len(obj))
    except Exception:  # an IterableDataset, a sampler without a length
        return None


#: Python objects counted in a Dataset at most: past this, copy-on-read can explain any growth.
MAX_OBJECTS = 200_000
_CONTAINERS = (list, tuple, dict, set, frozenset)


def python_objects(dataset: Any, cap: int = MAX_OBJECTS) -> int:
    """How many Python objects the Dataset holds, through its attributes, the containers in them
    and the attributes of the objects it holds (a Subset's dataset), up to `cap`. Reading an
    object in a forked worker copies at most the page its reference count is on: copy-on-read
    can copy at most this many pages into a worker."""
    seen: set[int] = {id(dataset)}
    stack: list[Any] = [getattr(dataset, "__dict__", {})]
    while stack and len(seen) <= cap:
        obj = stack.pop()
        items = obj.values() if isinstance(obj, dict) else obj
        for v in itertools.islice(items, cap + 1 - len(seen)):
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, dict):
                stack += [v, list(v)]
            elif isinstance(v, _CONTAINERS):
                stack.append(v)
            elif not isinstance(v, (type, type(gc))) and isinstance(getattr(v, "__dict__", None), dict):
                stack.append(vars(v))
    return len(seen) - 1


def _objects(dataset: Any) -> int | None:
    """`python_objects` of the Dataset, or None past MAX_OBJECTS or where its objects would not be
    read (an attribute lookup of the user's that raises)."""
    try:
        objects = python_objects(dataset)
    except Exception:  # a __getattr__ of the user's: the count is unknown, the workers still read
        return None
    return objects if objects < MAX_OBJECTS else None


def _info(name: str, loader: Any, it: Any = None) -> LoaderInfo:
    dataset = loader.dataset if loader is not None else it._dataset
    return LoaderInfo(
        name=name,
        dataset=type(dataset).__name__,
        dataset_len=_len(dataset),
        num_workers=int(loader.num_workers if loader is not None else it._num_workers),
        steps_per_epoch=_len(loader if loader is not None else it),
        persistent=bool(loader.persistent_workers if loader is not None else it._persistent_workers),
        start_method=_start_method(getattr(loader, "multiprocessing_context", None)),
        dataset_objects=_objects(dataset),
    )


def identify(new: dict[int, Any], frame: Any) -> dict[int, tuple[LoaderInfo, int]]:
    """{pid: (the loader, worker index)} for the new worker processes `new` ({pid: Process})
    that belong to a DataLoader; PIDs of other child processes are left out."""
    sight = loaders_in_sight(frame)
    out: dict[int, tuple[LoaderInfo, int]] = {}
    for name, loader in sight.values():  # a persistent loader keeps its iterator: exact PIDs
        it = getattr(loader, "_iterator", None)
        for i, w in enumerate(getattr(it, "_workers", ())):
            if w.pid in new:
                out[w.pid] = (_info(name, loader), i)
    rest = {pid: p for pid, p in new.items() if pid not in out}
    if not rest:
        return out
    fits = [(n, x) for n, x in sight.values() if x.num_workers == len(rest) and not x.persistent_workers]
    if len(fits) == 1:
        info = _info(*fits[0])
        return {**out, **{pid: (info, i) for i, pid in enumerate(sorted(rest))}}
    by_dataset = {id(x.dataset): (n, x) for n, x in sight.values()}
    for it in _iterators_owning(list(rest.values())):
        named = by_dataset.get(id(it._dataset))
        if named is None:
            info = _info(f"a DataLoader over {type(it._dataset).__name__}", None, it)
        else:
            info = _info(named[0], named[1])
        for i, w in enumerate(it._workers):
            if w.pid in rest:
                out[w.pid] = (info, i)
    return out
