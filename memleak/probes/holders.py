"""Who holds a tensor: a budgeted walk of references from known roots.

Instead of scanning every object the garbage collector tracks (tens of
milliseconds with torch loaded), the walk starts from the places a training
loop keeps things: the user's frames (the loop that called ``tracker.step()``
and its callers), the globals of their modules (and of the modules that define
the model's classes), the model's module tree (attributes, buffers, hook
closures) and the objects reachable from there. Each tensor it meets gets the
*holder* that names it: the nearest named owner on the path that reached it
(``history``, ``metric.preds``, ``layers.1.attn.cache``), with container
indices collapsed, so the tensors a growing list holds count under one name.

This module picks the roots and runs the walk (`walk_roots`); the walk itself is
`walk.Walk`, what it tallies per holder `holder_stats`, and whose frames are the
user's `frames`.

Everything here is read-only and keeps no reference after it returns, apart
from the weak references in `Ages`.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
import weakref
from typing import TYPE_CHECKING, Any

from ..records import HoldersRecord
from . import reach
from .bounds import code_bound
from .frames import (
    is_locals_snapshot,
    loop_variables,
    release_snapshots,
    user_code,
)
from .global_roots import add_all_globals, add_class_containers, add_root, user_globals
from .graphs import Roots
from .holder_stats import HolderStats
from .identity import Ages, Modules, model_modules, module_names
from .jit_traces import add_traced
from .local_aliases import user_instance
from .outside_held import NOTE as OUTSIDE_NOTE
from .outside_held import OutsideHeld, fold_outside
from .process_roots import add_process_roots
from .reach import closure_items
from .stores import find_store, source_regions
from .walk import Walk
from .walk_scope import library_classes

if TYPE_CHECKING:
    from .thread_held import ThreadHeld

# Holders of plain Python data only (no tensor) recorded from this many bytes: a config dict or a
# short list of floats is not worth a row at every walk; growth past it is seen as it starts.
_MIN_DATA_BYTES = 16 * 1024
# Holders, largest first, whose storing line is looked up in the source.
_STORES_LOOKED_UP = 20
# How a container found by thread_held.py is said to be reached.
_THREAD_NOTE = "a local of a function another thread runs (named from its code: running threads' frames are not read)"
# Live weakref.finalize callbacks of the user's code walked at most from each end of the registry.
_FINALIZERS_SAMPLED = 16


def walk_roots(
    *,
    step: int,
    model,
    optimizer,
    ages: Ages,
    exclude: set[int],
    frames: list,
    budget: int = 6000,
    graph_cap: int = 3000,
    device_type: str | None = None,
    prev_roots: dict[str, Roots] | None = None,
    traces_since: int = 0,
    modules_since: int | None = None,
    modules: Modules | None = None,
    thread_held: ThreadHeld | None = None,
    outside: OutsideHeld | None = None,
) -> Walk:
    """Walk from the frames' locals, their globals, and the model tree (with frames: torch.jit.trace's
    functions since the first `traces_since`, the user's modules since the first `modules_since` of
    sys.modules). `modules`: the model's, if known. `thread_held`, `outside`: the run's scans for
    what other threads keep, and for models kept from outside Python's view."""
    mods = model_modules(model) if modules is None else modules
    classes = list(dict.fromkeys(type(m) for _, m in mods))  # where the model's code and globals are
    w = Walk(
        step=step,
        exclude=exclude,
        ages=ages,
        module_names=module_names(model, mods),
        budget=budget,
        graph_cap=graph_cap,
        device_type=device_type,
        prev_roots=prev_roots,
    )
    w.regions = source_regions(frames, classes)
    w.visited.update([id(model)] if model is not None else [])  # walked below as the model tree, with module paths
    later: list[tuple] = []  # loop variables: named by the container they came from where it is reached
    snapshots, module_loops = _add_frame_locals(w, frames, later)
    globals_list = user_globals(frames, classes)
    # the model tree next: its attributes get module paths even when a local names the model
    if model is not None:
        w.visited.discard(id(model))
        w.push(model, "", None, "module_attr")
    add_all_globals(w, globals_list, frames, module_loops, later)
    for cls in library_classes(classes):
        add_class_containers(w, cls.__name__, cls)
    if optimizer is not None:  # its extra attributes, when no variable reached it
        w.add_root(optimizer, "optimizer", "local")
    if frames:  # what the process keeps (not the model-only scan): finalizer callbacks, jit traces
        _add_finalizers(w)
        _add_threads(w)
        _add_global_hooks(w)
        add_process_roots(w, modules_since)
        add_traced(w, traces_since)
    try:
        _run(w, later, thread_held, outside)
    finally:
        release_snapshots(snapshots, w.snapshots)
        w.snapshots = []
    return w


def _run(w: Walk, later: list[tuple], thread_held: ThreadHeld | None, outside: OutsideHeld | None) -> None:
    """Walk the roots queued, then the loop variables (`later`), then what other threads keep
    (when a scan is due), then what is kept from outside Python's view, and total the holders."""
    w.run(finish=False)
    for root in later:
        w.add_root(*root)
    if thread_held is not None and thread_held.due():
        w.run(finish=False)
        try:
            found = thread_held.roots(w.visited, w.exclude)
        except Exception:  # a strange object met in the scan: no more scans, the walk goes on
            thread_held.give_up()
            found = []
        for container, name in found:
            w.add_root(container, name, "local", _THREAD_NOTE)
    added = _add_outside(w, outside) if outside is not None else []
    w.run()
    fold_outside(w, added)


def _add_outside(w: Walk, outside: OutsideHeld) -> list[tuple[Any, str]]:
    """Queue the holders found before of parameters no root reaches; then, on a scan, look for
    more among those still unreached (outside_held.py). The holders queued."""
    added = outside.followed_roots()
    for obj, name in added:
        w.add_root(obj, name, "outside", OUTSIDE_NOTE)
    if outside.scan_due(w.step):
        w.run(finish=False)  # what the holders found before keep is reached: the scan looks past it
        try:
            # what the walk did not reach for want of budget is no sign of anything
            found = [] if w.truncated else outside.scan(w.step, w.visited, w.exclude)
        except Exception:  # a strange object met in the scan: no more scans, the walk stands
            outside.give_up()
            found = []
        for obj, name in found:
            w.add_root(obj, name, "outside", OUTSIDE_NOTE)
        added += found
    return added


def holders_record(
    walk: Walk,
    step: int,
    walk_seconds: float,
    scope: str = "",
    before: dict[str, tuple] | None = None,
    code_bounds: dict[str, int] | None = None,
    new_grew: bool = True,
) -> HoldersRecord:
    """The ``holders`` record of a walk: its largest holders first, the largest with the user's
    line that stores into them. `scope`: "model" for a walk of the model tree only. `before`: what
    the walk before found (`holder_sizes`): a store is looked up only for a holder new since or
    grown (the report names the line of a leaking holder only, and parsing the user's files is a
    first deep step's largest cost); empty, the first walk: none; `new_grew`, False: a holder new
    to `before` did not grow (the run's last walk, from frames of its own). `code_bounds`: the bounds the
    user's code trims containers to (`bounds.code_bound`), looked up with the stores and kept
    there from one walk to the next."""
    # holders of tensors, and of plain Python data (pydata) big enough to matter
    kept = [h for h in walk.holders.values() if h.count > 0 or h.nodes > 0 or h.obj_bytes >= _MIN_DATA_BYTES]
    holders = sorted(kept, key=lambda s: -(s.nbytes + s.obj_bytes))[:60]
    rows = []
    for i, h in enumerate(holders):
        stored = ""
        if i < _STORES_LOOKED_UP:
            grew = _grew(h, before, new_grew)
            if code_bounds is not None:
                _bound_by_code(h, walk, code_bounds, grew)
            stored = (find_store(h.holder, walk.regions) or "") if grew else ""
        rows.append(h.row(stored=stored))
    return HoldersRecord(
        step=step,
        holders=tuple(rows),
        buffers=walk.buffers,
        walk_seconds=round(walk_seconds, 6),
        nodes_walked=walk.nodes,
        truncated=walk.truncated,
        scope=scope,
    )


def _bound_by_code(h: HolderStats, walk: Walk, code_bounds: dict[str, int], look_up: bool) -> None:
    """A container the user's code trims to N items (`bounds`), holding no more: bounded, as a
    deque's maxlen bounds one (`look_up`: it grew, look the bound up if not known yet)."""
    n = walk.lengths.get(h.holder)
    if not n or h.capacity:
        return
    if look_up and h.holder not in code_bounds:
        owner = walk.attrs_of.get(h.holder.rsplit(".", 1)[0]) if "." in h.holder else None
        code_bounds[h.holder] = code_bound(h.holder, walk.regions, owner) or 0
    cap = code_bounds.get(h.holder)
    if cap and n <= cap:
        h.capacity, h.length = cap, n


def _grew(h: HolderStats, before: dict[str, tuple] | None, new_grew: bool = True) -> bool:
    """Whether holder `h` is new since the walk that found `before` (if `new_grew`), or holds more
    (None: no walk to compare with, every holder counts)."""
    if before is None:
        return True
    was = before.get(h.holder)
    if was is None:
        return new_grew and bool(before)
    return any(a > b for a, b in zip((h.count, h.nbytes, h.nodes, h.obj_bytes), was, strict=True))


# -- roots
def _add_frame_locals(w: Walk, frames: list, later: list) -> tuple[list[dict], dict[int, frozenset[str]]]:
    """Each frame's locals as roots, its loop variables into `later` (`frames.loop_variables`: an
    alias of an item of what the loop iterates, walked once all else was). Returns the f_locals
    snapshots read (to empty after the walk), and the loop variables of the module code running,
    by id of its globals (`add_globals` defers those)."""
    snapshots = []
    module_loops: dict[int, frozenset[str]] = {}
    for i, f in enumerate(frames):
        loc = f.f_locals
        if loc is f.f_globals:
            module_loops[id(loc)] = loop_variables(f.f_code)
            continue
        note = reach.frame_note(f, i == 0)
        loops = loop_variables(f.f_code)
        for k, v in list(loc.items()):
            if not k.startswith("__"):
                add_root(w, later, loops, v, k, "local", note)
                if user_instance(k, v):
                    w.instance_locals.setdefault(id(v), k)
        if is_locals_snapshot(f, loc):
            snapshots.append(loc)
    return snapshots, module_loops


def _add_finalizers(w: Walk) -> None:
    """The callbacks of live ``weakref.finalize`` objects whose code is the user's: the finalizer
    registry keeps each callback, its arguments and the object a bound-method callback belongs to
    until the watched object dies, so a callback that keeps that object alive (a tracker mapping it,
    whose bound method is the callback) keeps it, and itself, for the life of the process. Named by
    the callback's owner (a bound method's class) or the callback."""
    try:
        infos = list(weakref.finalize._registry.values())  # type: ignore[attr-defined]
    except Exception:  # a Python without the registry: no finalizer roots
        return
    user = [i for i in infos if user_code(getattr(i, "func", None))]
    user, weight = reach.sampled_ends(user, _FINALIZERS_SAMPLED)  # many: their ends, each for its share
    for info in user:
        fn = info.func
        name = reach.fn_name(fn)
        note = f"kept by the weakref.finalize callback {name}(): the finalizer registry keeps it until its object dies"
        owner = getattr(fn, "__self__", None)
        if owner is not None:
            w.push(owner, type(owner).__name__, type(owner).__name__, "finalizer", weight, note)
        for i, arg in enumerate([*(info.args or ()), *(info.kwargs or {}).values()]):
            w.push(arg, f"{name}.args[{i}]", f"{name}.args[{i}]", "finalizer", weight, note)
        for var, value in closure_items(fn):
            w.push(value, var, reach.closure_holder(fn, var), "closure", weight, note)


def _add_threads(w: Walk) -> None:
    """The arguments of threads the user's code started that still run: a thread keeps its
    target's arguments until it returns, so one started every step for slow work (an upload, a
    save) piles up with what it was given. Named ``Thread(target=NAME)`` after the target (a
    ``threading.Timer``'s function too); a Thread subclass of the user's, by its class, with its
    attributes.

    Another thread's frames (its functions' locals) are not read: on Python 3.11 reading a running
    thread's frames (`sys._current_frames`, ``f_back``) can crash the process (sentry-python#2386
    and #6119, dd-trace-py#13567), and a profiler must never crash the run it watches."""
    me = threading.get_ident()
    for th in threading.enumerate():
        if th.ident == me:
            continue
        target = getattr(th, "_target", None) or getattr(th, "function", None)  # a Timer's
        if user_code(target):
            name = f"Thread(target={reach.fn_name(target)})"
            note = f"an argument of a running thread of {reach.fn_name(target)}(): kept until the thread returns"
            args = getattr(th, "_args", None) or getattr(th, "args", None) or ()
            kwargs = getattr(th, "_kwargs", None) or getattr(th, "kwargs", None) or {}
            for arg in [*args, *kwargs.values()]:
                w.push(arg, name, name, "thread", 1.0, note)
        elif user_code(getattr(type(th), "run", None)):  # a subclass with a run() of its own
            name = type(th).__name__
            w.push(th, name, name, "thread", 1.0, f"a running {name} thread: kept until its run() returns")


# torch's hooks that run for every module or every optimizer, by the function that registers them
_GLOBAL_HOOKS = (
    ("torch.nn.modules.module", "_global_forward_pre_hooks", "register_module_forward_pre_hook"),
    ("torch.nn.modules.module", "_global_forward_hooks", "register_module_forward_hook"),
    ("torch.nn.modules.module", "_global_backward_pre_hooks", "register_module_full_backward_pre_hook"),
    ("torch.nn.modules.module", "_global_backward_hooks", "register_module_full_backward_hook"),
    ("torch.nn.modules.module", "_global_module_registration_hooks", "register_module_module_registration_hook"),
    ("torch.nn.modules.module", "_global_parameter_registration_hooks", "register_module_parameter_registration_hook"),
    ("torch.nn.modules.module", "_global_buffer_registration_hooks", "register_module_buffer_registration_hook"),
    ("torch.optim.optimizer", "_global_optimizer_pre_hooks", "register_optimizer_step_pre_hook"),
    ("torch.optim.optimizer", "_global_optimizer_post_hooks", "register_optimizer_step_post_hook"),
)


def _add_global_hooks(w: Walk) -> None:
    """The user's hooks on every module or optimizer (``register_module_forward_hook``, the tools
    for profiling and visualisation): torch keeps each in a dict of its own module until removed,
    and what a hook's closure or object keeps (each step's activations) with it. memleak's own
    are not the user's code."""
    for module_name, dict_name, register in _GLOBAL_HOOKS:
        hooks = getattr(sys.modules.get(module_name), dict_name, None)
        user = {k: fn for k, fn in list(hooks.items()) if _user_callable(fn)} if hooks else {}
        where = f"every {'module' if '.nn.' in module_name else 'optimizer'} ({register})"
        for fn, copies in reach.hooks_with_copies(user):
            if isinstance(fn, (types.FunctionType, types.MethodType)):
                w.hook(fn, where, 1.0, copies)
            else:  # a hook object by its class, a partial by its function; what it keeps by attribute
                name = f"partial({reach.fn_name(fn.func)})" if isinstance(fn, functools.partial) else type(fn).__name__
                w.push(fn, name, name, "hook", 1.0, f"hook {name} on {where}")


def _user_callable(fn) -> bool:
    """A function or method of the user's, a partial of one, or an object of a class whose __call__ is."""
    fn = fn.func if isinstance(fn, functools.partial) else fn
    return user_code(fn) or user_code(getattr(type(fn), "__call__", None))  # noqa: B004
