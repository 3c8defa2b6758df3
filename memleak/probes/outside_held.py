"""Models no root reaches, named by what keeps them from outside Python's view.

A model (or an optimizer's parameters) built again and again whose old copies stay alive although
no variable, attribute or container reaches them: something C++ holds keeps them, as a callback
(a comm hook that closes over its ``DistributedDataParallel``, handed to DDP's C++ reducer, which
the wrapper itself holds: pytorch#63211), or the interpreter does (``atexit``). Their parameters
are made inside torch's constructors, where the creation-site mode tags nothing, so no survivor
check counts them either.

While memory grows (a growth window of level auto), a few deep steps a run list the live
parameters (`census.live_tensors`, one pass over what the collector tracks) that are neither the
run's own nor reached by the walk, nor unreached at the first such list (what the process held
before: another loop's leftovers), and climb ``gc.get_referrers`` from one of them to the outermost
object only C code refers to: a function of the user's there (``hook_with_fold_step``) or a bound
method names the holder. That object is walked as a root from then on (followed by weak
reference), so the holder's parameters are counted at every walk, and each scan adds those of
copies made since.
"""

from __future__ import annotations

import collections
import gc
import math
import re
import sys
import time
import types
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .census import live_tensors
from .frames import user_code
from .holder_families import rename_holders
from .reach import CLOSURE_MARK, qualname

if TYPE_CHECKING:
    from .holder_stats import HolderTally

#: Scans in a row that found no new holder, after which a run scans no more; climbs a scan (each
#: level of a climb scans every object the collector tracks, again).
MAX_MISSES = 3
MAX_CLIMBS = 4
#: Steps between two scans at least: copies made a fold or a trial apart show as a rise between them.
SCAN_GAP = 4
#: Unreached parameter bytes a scan needs before it climbs (a leftover of the user's set-up is smaller).
MIN_BYTES = 256 << 10
#: Levels of referrers climbed at most, from a parameter to the outermost object, and objects met.
DEPTH = 24
WIDTH = 2000
#: A scan's climbs stop after this long (each level is a pass over every tracked object: 10-20 ms
#: in a training process, 100 ms in a test runner's worker that ran a thousand tests).
SCAN_SECONDS = 2.0
NOTE = (
    "kept from outside Python's view (a callback C++ holds, such as a DDP comm hook, or the interpreter's "
    "atexit list): no variable, attribute or container refers to it"
)


class OutsideHeld:
    """One run's scans, and the outermost objects found, followed by weak reference."""

    def __init__(self) -> None:
        self.misses = -1  # the first scan only notes what is unreached already
        self.last_scan = -SCAN_GAP
        self.followed: list[tuple[str, weakref.ref]] = []
        self.before: dict[int, weakref.ref] | None = None  # the unreached parameters at the first scan
        self.growing = False  # memory grows (set before each walk: a growth window of level auto)
        self.seconds = 0.0  # what the last walk's scan took

    def give_up(self) -> None:
        self.misses, self.followed = MAX_MISSES, []

    def scan_due(self, step: int) -> bool:
        """While memory grows or once a holder was found, every SCAN_GAP steps early and an eighth
        of the run later (a long run scans some forty times at most), until MAX_MISSES scans in a
        row found nothing."""
        gap = max(SCAN_GAP, step // 8)
        # once a holder is found, at every walk it is due at (a check of level auto's too)
        return (self.growing or bool(self.followed)) and self.misses < MAX_MISSES and step - self.last_scan >= gap

    def followed_roots(self) -> list[tuple[Any, str]]:
        """(object, name) of the outermost holders found so far that are still alive (a walk begins)."""
        self.seconds = 0.0
        self.followed = [(name, ref) for name, ref in self.followed if ref() is not None]
        return [(obj, name) for name, obj in ((n, r()) for n, r in self.followed) if obj is not None]

    def scan(self, step: int, reached: set[int], exclude: set[int]) -> list[tuple[Any, str]]:
        """(object, name) of the outermost holders of the live parameters neither `reached` by the
        walk (the followed holders' included) nor the run's own (`exclude`), followed from now on."""
        t0 = time.perf_counter()
        try:
            return self._scan(step, reached, exclude)
        finally:
            self.seconds = time.perf_counter() - t0

    def _scan(self, step: int, reached: set[int], exclude: set[int]) -> list[tuple[Any, str]]:
        self.misses += 1  # until it finds one
        self.last_scan = step
        params = _unreached_params(reached, exclude)
        if self.before is None:  # what was unreached before: another loop's leftovers, never this run's suspects
            self.before = {id(p): weakref.ref(p) for p in params}
            return []
        params = [p for p in params if not _same(self.before.get(id(p)), p)]
        if sum(_nbytes(p) for p in params) < MIN_BYTES:
            return []
        found: list[tuple[Any, str]] = []
        climbed: set[int] = set()
        # the newest first (last in the collector's lists), spread over the list: one copy's
        # parameters lie together, and a climb from a second one of them stops where the first went
        newest = params[::-1][:: max(1, len(params) // (2 * MAX_CLIMBS))][:MAX_CLIMBS]
        ours = {id(params), id(found), id(newest)}  # this scan's own lists refer to what they hold
        deadline = time.perf_counter() + SCAN_SECONDS
        for i in range(len(newest)):  # by index: a list iterator would refer to them too
            top = _outermost(newest[i], climbed, ours, deadline)
            if top is None:
                continue
            name = _name(top)
            try:
                self.followed.append((name, weakref.ref(top)))
            except TypeError:  # not weakly referable: walked this once
                pass
            found.append((top, name))
        del params, newest
        if found:
            self.misses = 0
        return found


def _unreached_params(reached: set[int], exclude: set[int]) -> list[torch.Tensor]:
    return [
        t for t in live_tensors() if isinstance(t, torch.nn.Parameter) and id(t) not in reached and id(t) not in exclude
    ]


def _same(ref: weakref.ref | None, t: torch.Tensor) -> bool:
    return ref is not None and ref() is t


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return 0


def _outermost(obj: Any, climbed: set[int], ours: set[int], deadline: float = math.inf) -> Any:
    """An object above `obj` (by `gc.get_referrers`, level by level: one pass over the tracked
    objects a level) that something the collector does not track refers to (C++, the interpreter):
    more references than the tracked objects that refer to it account for. The user's function or
    method among those, else the first. None where the climb meets one climbed before (the same
    holder), a module's globals or a running function's frame (roots), finds only a reference cycle
    that nothing outside keeps (garbage the collector will free), or goes past DEPTH levels or
    WIDTH objects, or past `deadline`. `ours`: the scan's own lists, which refer to what they hold."""
    ours = {*ours}
    seen = {id(obj)}
    frontier = [obj]
    ours.update((id(seen), id(frontier)))
    for level in range(DEPTH):
        if time.perf_counter() > deadline:
            return None
        every = [*frontier, object()]  # the frontier and a fresh marker, referred to alike
        refs = gc.get_referrers(*every)  # one pass a level: the climb's and the counts'
        ours.update((id(refs), id(every)))
        if level:  # a parameter's own references (its module's dict, autograd's) are not the question
            tops = [o for o, outside in zip(frontier, _held_outside(every, refs), strict=False) if outside]
            if tops:
                climbed.update(seen)
                return next((o for o in tops if _callable_of_user(o)), tops[0])
        up = [r for r in refs if id(r) not in ours and not _own_frame(r)]
        del refs
        if any(id(r) in climbed or _is_globals(r) or isinstance(r, types.FrameType) for r in up):
            return None  # the same holder again, a module's global, a running function's local: a root
        frontier = [r for r in up if id(r) not in seen]
        del up
        if not frontier or len(seen) + len(frontier) > WIDTH:
            return None
        seen.update(id(r) for r in frontier)
        ours.add(id(frontier))
    return None


def _held_outside(every: list, refs: list) -> list[bool]:
    """For each object of `every` but its last (a fresh marker), whether it has references that
    none of `refs` (every tracked object that refers to one of them) accounts for: what the
    collector itself computes to find garbage, measured against the marker (the counting's own)."""
    want = {id(o) for o in every}
    seen_by: collections.Counter[int] = collections.Counter()
    for r in refs:
        if r is not every:
            seen_by.update(i for i in map(id, gc.get_referents(r)) if i in want)
    counts = [sys.getrefcount(o) - seen_by[id(o)] for o in every]
    return [c > counts[-1] for c in counts[:-1]]


def _own_frame(r: object) -> bool:
    """A frame of this module's, whose locals are the climb's own."""
    return isinstance(r, types.FrameType) and r.f_code.co_filename == __file__


def _is_globals(d: object) -> bool:
    return isinstance(d, dict) and "__name__" in d and "__builtins__" in d


def _callable_of_user(obj: object) -> bool:
    return isinstance(obj, (types.FunctionType, types.MethodType)) and user_code(obj)


def _name(obj: object) -> str:
    if isinstance(obj, types.MethodType):
        return f"{type(obj.__self__).__name__}.{obj.__func__.__name__}"
    if isinstance(obj, types.FunctionType):
        return qualname(obj).replace(".<locals>", "")
    return type(obj).__name__


def fold_outside(tally: HolderTally, roots: list[tuple[Any, str]]) -> None:
    """What the walk counted below each outside holder, under one name: the holder itself for an
    object's attributes (``Trainer.close.model.0.weight``: ``Trainer.close``), the closure variable
    for a function's (``ddp.module.0.weight (closure of wrap.<locals>.hook)``: ``ddp (closure of ...)``)."""
    for obj, name in roots:
        closure = f"{CLOSURE_MARK}{qualname(obj)})" if isinstance(obj, types.FunctionType) else ""
        for held in list(tally.holders):
            into = None
            if held == name or held.startswith((name + ".", name + "[")):
                into = name
            elif closure and held.endswith(closure):
                into = re.split(r"[.\[]", held[: -len(closure)], maxsplit=1)[0] + closure
            if into is None:
                continue
            if into != held:
                rename_holders(tally, held, into)
            st = tally.holders[into]
            st.kind, st.note = "outside", NOTE  # whatever the parts were (an optimizer's groups, a module's)
