"""Tensors another thread makes and keeps in its running function's locals (a prefetcher that keeps
every batch it made): creation sites are tagged in the training thread only, and running threads'
frames are not read (they can crash Python 3.11: holders.py), so neither the tags nor the walk see
them. While a thread the user's code started runs, a few deep steps a run also list every live
tensor (`census.live_tensors`, one pass over the objects the garbage collector tracks): those no
root reached at this walk and the one before, and that are new since the first such list, are
climbed to by gc referrers (`referrers.name_by_referrers`). A container a thread's function holds
is walked as a root, named after that function's local, so its count is sampled like any holder's.
"""

from __future__ import annotations

import collections
import gc
import threading
import weakref
from collections.abc import Set as AbstractSet
from typing import Any

import torch

from ..holder_names import is_thread_local
from .census import live_tensors
from .frames import user_code
from .referrers import name_by_referrers

#: Deep steps a run that list every live tensor (each a pass over every object the collector tracks).
MAX_SCANS = 8
#: Containers looked up a scan (each climb scans every object the collector tracks, again).
MAX_CLIMBS = 2
_CONTAINERS = (list, dict, collections.deque, set)


def user_thread_running() -> bool:
    """Whether a thread other than this one runs a function of the user's (its target, or the
    run() of a Thread subclass of the user's): a library's threads (tqdm's monitor, a DataLoader's
    pin-memory thread) ask for no scan."""
    me = threading.get_ident()
    for th in threading.enumerate():
        if th.ident == me:
            continue
        if user_code(getattr(th, "_target", None) or getattr(type(th), "run", None)):
            return True
    return False


class ThreadHeld:
    """One run's scans: the tensors unreached at the first (never suspects: what the process held
    before) and at the last; and the containers found, followed from walk to walk by the id of the
    container and weak references to its oldest tensors (no reference to the container is kept)."""

    def __init__(self) -> None:
        self.scans = 0
        self.first: dict[int, weakref.ref] | None = None
        self.last: dict[int, weakref.ref] = {}
        self.followed: list[tuple[str, int, list[weakref.ref]]] = []  # (name, id of container, its tensors)

    def give_up(self) -> None:
        """No more scans nor follows this run (one failed)."""
        self.scans, self.followed = MAX_SCANS, []

    def due(self) -> bool:
        return (bool(self.followed) or self.scans < MAX_SCANS) and user_thread_running()

    def roots(self, reached: set[int], exclude: set[int]) -> list[tuple[Any, str]]:
        """(container, name) for each container a running thread's function holds: those found
        before, found again; else, on a scan, among the tensors not in `reached` (what the walk
        visited) nor `exclude` (the run's own)."""
        found = self._follow()
        if found or self.scans >= MAX_SCANS:
            return found
        self.scans += 1
        now = _unreached(reached, exclude)
        if self.first is None:
            self.first = now
        kept = [ref for i, ref in now.items() if _same(self.last.get(i), ref) and not _same(self.first.get(i), ref)]
        self.last = now
        held: set[int] = set()  # the tensors of the containers looked up so far
        for ref in reversed(kept[-MAX_CLIMBS * 4 :]):  # the newest first
            t = ref()
            if len(found) >= MAX_CLIMBS or t is None or id(t) in held:
                continue
            holder = _container_of(t, reached)
            del t
            if holder is None or id(holder) in held:
                continue
            held.add(id(holder))
            held.update(id(v) for v in _tensors_in(holder))
            name = name_by_referrers(ref)
            if name and is_thread_local(name):
                found.append((holder, name))
                self.followed.append((name, id(holder), _refs(holder)))
        return found

    def _follow(self) -> list[tuple[Any, str]]:
        """The containers found before, each found again through one of its tensors still in it."""
        found: list[tuple[Any, str]] = []
        followed = []
        for name, cid, refs in self.followed:
            alive = [t for t in (r() for r in refs) if t is not None]
            holder = _container_of(alive[0], want=cid) if alive else None
            del alive
            if holder is not None:
                found.append((holder, name))
                followed.append((name, cid, refs))
        self.followed = followed
        return found


def _container_of(t: torch.Tensor, reached: AbstractSet[int] = frozenset(), want: int | None = None) -> Any:
    """The container the walk did not reach (`reached`) that holds `t`, directly or in a tuple it
    holds (a list of `(x, y)` batches), or the one whose id is `want`; None when there is none."""

    def pick(refs: list) -> Any:
        ok = (lambda r: id(r) == want) if want is not None else (lambda r: id(r) not in reached and r is not mine)
        return next((r for r in refs if type(r) in _CONTAINERS and ok(r)), None)

    refs = mine = gc.get_referrers(t)  # a list that holds the tuples met: not theirs
    found = pick(refs)
    for tup in (r for r in refs if found is None and type(r) is tuple and id(r) not in reached):
        found = pick(gc.get_referrers(tup))
        if found is not None:
            break
    return found


def _tensors_in(container: Any) -> list[torch.Tensor]:
    """The tensors `container` holds, directly or in the tuples it holds."""
    out: list[torch.Tensor] = []
    for v in list(container.values() if isinstance(container, dict) else container):
        for x in v if type(v) is tuple else (v,):
            if isinstance(x, torch.Tensor):
                out.append(x)
    return out


def _refs(container: Any, n: int = 4) -> list[weakref.ref]:
    """Weak references to the first `n` tensors of `container` (the oldest: still there while it grows)."""
    return [weakref.ref(t) for t in _tensors_in(container)[:n]]


def _same(a: weakref.ref | None, b: weakref.ref) -> bool:
    """Whether two weak references are to the same live tensor (an id can be reused once one dies)."""
    t = a() if a is not None else None
    return t is not None and t is b()


def _unreached(reached: set[int], exclude: set[int]) -> dict[int, weakref.ref]:
    """Weak references to the live tensors the walk did not visit, by id (parameters aside)."""
    out: dict[int, weakref.ref] = {}
    for t in live_tensors():
        i = id(t)
        if i not in reached and i not in exclude and not isinstance(t, torch.nn.Parameter):
            try:
                out[i] = weakref.ref(t)
            except TypeError:
                continue
    return out
