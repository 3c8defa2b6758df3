"""Naming what holds a tensor the root walk did not reach, by climbing ``gc.get_referrers``.

Costly (each climb scans every object the collector tracks), so the TensorProbe calls it for a
few creation sites per run only. Split from `tensors` (which imports it).
"""

from __future__ import annotations

import collections
import gc
import threading
import types
from typing import Any

import torch

from ..holder_names import thread_local_name
from .frames import is_user_file
from .reach import fn_name, frame_holder, stack_ids
from .stores import called_names, filled_locals


def _type_name(owner: object) -> str:
    if isinstance(owner, types.FunctionType):  # its __dict__: `train_step.last`, not `function.last`
        return owner.__qualname__
    tname = type(owner).__name__
    if isinstance(owner, torch.autograd.function.BackwardCFunction):
        tname = tname.removesuffix("Backward") + ".ctx"
    return tname


def _attribute_of(owner: object, target: object) -> str:
    """The attribute of a plain object that is `target`, or ''."""
    if isinstance(owner, (type, types.ModuleType, types.FunctionType, types.CellType)):
        return ""
    try:
        d = object.__getattribute__(owner, "__dict__")
    except Exception:  # no __dict__ (slots, C objects), or a proxy that refuses
        return ""
    if not isinstance(d, dict):
        return ""
    return next((str(k) for k, v in d.items() if v is target), "")


def _is_iterator(obj: object) -> bool:
    """An iterator of a C type (``itertools.cycle``, ``tee``, ``zip``, ``map``): no attributes to
    name it by, but it may keep what it yields (``cycle`` saves every item to replay it)."""
    t = type(obj)
    return hasattr(t, "__next__") and not hasattr(obj, "__dict__") and not isinstance(obj, types.GeneratorType)


def _iterator_name(iterators: list[str]) -> str:
    """Iterators climbed, innermost first, as the expression that built them: ``zip(cycle(...))``,
    when nothing refers to the outermost: it is a running ``for`` loop's own iterator."""
    return "".join(f"{n}(" for n in reversed(iterators)) + "..." + ")" * len(iterators)


def _unreferenced(refs: list, ours: set[int]) -> bool:
    """Nothing but this climb refers to the object (cells: this module's own, by which its
    generator expressions close over the target)."""
    return all(id(r) in ours or isinstance(r, types.CellType) for r in refs)


def _frame_name(r, target, stack: set[int]) -> str:
    """`target` as a suspended generator's local, or a local of a frame a traceback keeps."""
    f = r if isinstance(r, types.FrameType) else (getattr(r, "gi_frame", None) or getattr(r, "cr_frame", None))
    return frame_holder(f, target, stack) if f is not None else ""


def name_by_referrers(ref, depth: int = 6) -> str:
    """A name for what holds a tensor the root walk did not reach, climbing gc referrers (costly:
    each step scans every object). An attribute of an object is named ``Type.attr`` (an autograd
    Function's ctx ``Function.ctx.attr``), a module global by its name; containers and iterators
    are climbed, and an iterator nothing refers to (a ``for`` loop's) is named as it was built. A
    finished frame is climbed past to what keeps it (a list of ``inspect.stack()`` records: what the
    user stores into); one that only a traceback keeps is named by its local."""
    target: Any = ref()
    if target is None:
        return ""
    chain: list[str] = []
    iterators: list[str] = []  # the C iterators climbed, innermost first
    ours: set[int] = set()
    stack = stack_ids()
    as_local = ""  # the local of a finished frame that holds it, if nothing names what keeps the frame
    for _ in range(depth):
        refs = gc.get_referrers(target)
        ours.add(id(refs))
        if iterators and iterators[-1] == type(target).__name__ and _unreferenced(refs, ours):
            return _iterator_name(iterators)
        found: object = None
        for r in refs:
            if id(r) in ours:
                continue
            if isinstance(r, (types.FrameType, types.GeneratorType, types.CoroutineType)):
                name = _frame_name(r, target, stack)
                if name and isinstance(r, types.FrameType) and not as_local:  # climb on to what keeps it
                    as_local, found, chain = _joined([name, *chain]), r, []
                    break
                if name:
                    return _joined([name, *chain])
                continue
            if isinstance(r, dict):
                key = next((k for k, v in r.items() if v is target), None)
                name = _dict_name(r, key, ours)
                if name:
                    return _joined([name, *chain])
                found = r
                if key is not None:
                    chain.insert(0, _key(key))
                break
            if isinstance(r, (list, tuple, set, frozenset, collections.deque)):
                found = r
                break
            if _is_iterator(r):
                found = r
                iterators.append(type(r).__name__)
                break
            attr = _attribute_of(r, target)
            if attr:  # Python 3.11+ keeps an object's attributes inline: the object itself refers
                return _joined([_type_name(r), attr, *chain])
        del refs
        if found is None:
            return as_local or (_thread_local(type(target).__name__) if target is not ref() else "")
        target = found
    return as_local


#: Locals of one thread's function named together at most, where its code does not say which one holds.
MAX_CANDIDATES = 3


def _thread_local(kind: str) -> str:
    """A container nothing the collector tracks refers to is held by C code or by a running
    function's local: the loop's own frames are walked, so likely another thread's, whose frames
    are not read (holders._add_threads: that can crash Python 3.11). Named by the one local of a
    running thread's function, or of a function of the user's it calls by name, that starts as an
    empty container of its type (`kind`: list, dict, deque ...) and is stored into (read from its
    code), as ``predictions (local of metrics_worker() in thread 'Thread-1')``. Where one function
    has a few such locals (a list of step numbers beside a list of embeddings), all are named, as
    ``seen_steps or embeddings (local of ...)``: its code does not say which one keeps the
    tensors. '' where none, or where they are in more than one function."""
    me = threading.get_ident()
    found: dict[tuple[str, str], list[str]] = {}
    for th in threading.enumerate():
        fn = getattr(th, "_target", None) or getattr(type(th), "run", None)
        if th.ident == me or not _user_function(fn):
            continue
        for f in (fn, *_user_callees(fn)):
            for var, t in filled_locals(f.__code__):
                if t == kind:
                    found.setdefault((fn_name(f), th.name), []).append(var)
    if len(found) != 1:
        return ""
    (((function, thread), names),) = found.items()
    return thread_local_name(" or ".join(names), function, thread) if len(names) <= MAX_CANDIDATES else ""


def _user_function(fn: Any) -> bool:
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and is_user_file(code.co_filename)


def _user_callees(fn: Any) -> list[Any]:
    """The user's functions `fn` calls by name (`target=lambda: drain(q)`, a worker handing each
    item to a helper): what they keep lives in the same thread, one call deeper."""
    names = getattr(fn, "__globals__", {})
    callees = (names.get(n) for n in called_names(fn.__code__))
    return [c for c in callees if isinstance(c, types.FunctionType) and c is not fn and _user_function(c)]


def _dict_name(d: dict, key: Any, ours: set[int]) -> str:
    """The name of `d`'s entry `key` where what owns `d` names it: a module's global, an object's
    attribute (``Type.attr``, or ``Type`` for a key that is no name); '' for a plain dict."""
    owners = gc.get_referrers(d)
    ours.add(id(owners))
    owner = next((o for o in owners if getattr(o, "__dict__", None) is d), None)
    if isinstance(owner, types.ModuleType) and key is not None:  # a module's global
        return _global(d, key)
    if owner is not None:
        return _joined([_type_name(owner), *([_key(key)] if key is not None else [])])
    if "__name__" in d and key is not None:  # a module's globals
        return _global(d, key)
    return ""


def _global(module_globals: dict, key: Any) -> str:
    """A module global as a part of a holder's name: bare in the user's own code, after its module's
    name in a library's (``somelib.metrics._CACHE``: code the user did not write, found by name)."""
    module, file = module_globals.get("__name__"), module_globals.get("__file__")
    if isinstance(module, str) and module != "__main__" and isinstance(file, str) and not is_user_file(file):
        return f"{module}.{_key(key)}"
    return _key(key)


def _key(key: Any) -> str:
    """A dict key as a part of a holder's name: a string as it is, anything else (a number, a
    tensor, a weak reference, whose repr is an address) as ``[...]``."""
    return key if isinstance(key, str) else "[...]"


def _joined(parts: list[str]) -> str:
    """A holder's name from its parts: ``cache.data.[...]`` is written ``cache.data[...]``."""
    return ".".join(parts).replace(".[...]", "[...]")
