"""Where Python keeps things beyond plain variables: closure cells and mutable defaults, caller
frames, an optimizer's own attributes, and reference cycles through autograd.

Helpers for the reference walk (`walk.Walk`) and the birth check (`tensors.TensorProbe`):

- a closure cell is named by its variable and the function whose closure keeps it,
  ``losses (closure of make_train_step.<locals>.train_step)``: the enclosing function may have
  returned long ago, so its variable lives on only in the cell;
- a frame's locals carry a note naming the function that owns them (a caller still running);
- an optimizer's attributes are walked, except its legitimate ``state``/``param_groups``;
- a surviving tensor that nothing names may be kept by a cycle through autograd's C++ graph,
  which Python's collector cannot see: its ``.grad`` made with ``create_graph=True`` (the grad's
  graph saved the tensor), or its ``grad_fn`` (a custom Function's ctx) holding the tensor itself.

Read-only; nothing here keeps a reference after it returns.
"""

from __future__ import annotations

import collections
import functools
import gc
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch

from ..holder_names import traceback_note
from .frames import is_internal

#: Optimizer attributes that are its legitimate, bounded structures (or hook registries).
_OPTIMIZER_OWN = frozenset({"state", "param_groups", "defaults"})
CLOSURE_MARK = " (closure of "
_GENERATOR_MARK = " (local of generator "
_COROUTINE_MARK = " (local of coroutine "
_CO_GENERATOR, _CO_COROUTINE = 0x20, 0x80


def qualname(fn: Any) -> str:
    """The function's qualified name as its code defines it (``functools.wraps`` rewrites
    ``__qualname__`` to the wrapped function's, the code object keeps the real one)."""
    code = getattr(fn, "__code__", None)
    name = getattr(code, "co_qualname", None) or getattr(fn, "__qualname__", None)
    return name or getattr(fn, "__name__", None) or type(fn).__name__


def owner_of(fn: Any) -> str:
    """The function that owns a closure's variables: the enclosing scope of ``fn``."""
    q = qualname(fn)
    return q.rsplit(".<locals>.", 1)[0] if ".<locals>." in q else q


def closure_holder(fn: Any, var: str) -> str:
    """Holder name of a closure variable: ``var (closure of outer.<locals>.inner)``."""
    return f"{var}{CLOSURE_MARK}{qualname(fn)})"


def closure_note(fn: Any, var: str, reached_as: str | None = None) -> str:
    via = f", reached as {reached_as}" if reached_as and reached_as != var else ""
    return f"{var} is a variable of {owner_of(fn)}() that the closure of {qualname(fn)} keeps alive{via}"


def suffix(holder: str | None) -> str:
    """The owner suffix of a holder name (kept when the name is extended by attributes)."""
    if holder and holder.endswith(")"):
        for mark in (CLOSURE_MARK, _GENERATOR_MARK, _COROUTINE_MARK):
            if mark in holder:
                return holder[holder.index(mark) :]
    return ""


def closure_items(fn: Any) -> Iterator[tuple[str, Any]]:
    """(variable name, value) of each filled closure cell of a function."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None)
    if code is None or not cells:
        return
    for name, cell in zip(code.co_freevars, cells, strict=False):
        try:
            yield name, cell.cell_contents
        except ValueError:  # an empty cell
            continue


def bound_items(fn: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """A ``functools.partial``'s function (nested partials unwrapped) and the values bound to it,
    each named by its parameter (``partial(keep, store=s)``: "store"), as a closure's are by their
    variables; `fn` itself and nothing bound for any other callable."""
    bound: list[tuple[str, Any]] = []
    while isinstance(fn, functools.partial):
        code = getattr(fn.func, "__code__", None)
        params = code.co_varnames[: code.co_argcount] if code is not None else ()
        bound += [(params[i] if i < len(params) else f"{fn_name(fn.func)}.args[{i}]", a) for i, a in enumerate(fn.args)]
        bound += list(fn.keywords.items())
        fn = fn.func
    return fn, bound


def default_items(fn: Any) -> Iterator[tuple[str, Any]]:
    """(argument name, default value) of a function: a mutable default lives as long as the function."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    defaults = getattr(fn, "__defaults__", None) or ()
    positional = code.co_varnames[: code.co_argcount]
    yield from zip(positional[len(positional) - len(defaults) :], defaults, strict=False)
    yield from (getattr(fn, "__kwdefaults__", None) or {}).items()


def fn_name(fn: Any) -> str:
    """A function's plain name for a note (a callable object's type name)."""
    return getattr(fn, "__name__", None) or type(fn).__name__


def frame_note(frame: Any, innermost: bool) -> str:
    """Evidence line for a frame's locals: which running function owns them."""
    if innermost:
        return f"a local variable of {_where(frame)}(), the function that ended the step"
    return f"a local variable of {_where(frame)}(), a caller that is still running"


def kept_frame_note(frame: Any) -> str:
    """Evidence line for the locals of a frame something keeps as an object."""
    return (
        f"a local of {_where(frame)}() in a frame kept as an object (inspect.stack(), sys._getframe()): "
        "it keeps its locals"
    )


def lru_cache_items(fn: Any) -> list:
    """What a `functools.lru_cache` keeps for the life of its function: each key and result. The
    cache is a C field: only the garbage collector's referents reach it."""
    refs = gc.get_referents(fn)
    own = getattr(fn, "__dict__", None)
    cache = next((r for r in refs if type(r) is dict and r is not own), None)
    if not cache:
        return []
    if type(next(iter(cache.values()))).__name__ == "_lru_list_elem":
        # a bounded cache: the links of its C list hold the keys and results, and the
        # wrapper's referents list them (the links' own referents are empty)
        skip = {id(cache), id(own), id(getattr(fn, "__wrapped__", None))}
        return [r for r in refs if id(r) not in skip and type(r) not in (type, object)]
    return [x for key_and_result in cache.items() for x in key_and_result]


def optimizer_items(opt: Any) -> Iterator[tuple[str, Any]]:
    """An optimizer's own attributes beyond its state: lists or buffers a subclass adds."""
    d = getattr(opt, "__dict__", None)
    if not isinstance(d, dict):
        return
    for k, v in d.items():
        if k in _OPTIMIZER_OWN or k.startswith(("_optimizer_", "__")) or callable(v):
            continue  # its state and hook registries are its own; a callable is a patched method
        yield k, v


def optimizer_hook_dicts(opt: Any) -> list[tuple[str, dict]]:
    """(registry, hooks) for an optimizer's step and state-dict hooks (their closures and default
    arguments may keep what they log; one registered every step piles up), torch's and memleak's
    own hooks left out."""
    out = []
    for k, v in (getattr(opt, "__dict__", None) or {}).items():
        if k.startswith("_optimizer_") and k.endswith("_hooks") and isinstance(v, dict) and v:
            out.append((k, {i: fn for i, fn in list(v.items()) if not _internal_code(fn)}))
    return out


def _internal_code(fn: Any) -> bool:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and is_internal(code)


def hooks_with_copies(hooks: Any) -> list[tuple[Any, int]]:
    """(hook, copies) for each hook in a module's or a tensor's hook dict; `copies`: how many of
    them share its code (a hook registered on every step and never removed piles up). A list, not
    a generator: the walk asks for every module's and parameter's dicts, nearly all empty."""
    if not hooks:
        return []
    fns = [fn[0] if isinstance(fn, tuple) else fn for fn in list(hooks.values())]
    copies = collections.Counter(getattr(fn, "__code__", None) for fn in fns)
    return [(fn, copies[getattr(fn, "__code__", None)]) for fn in fns]


def async_result(obj: Any) -> list | None:
    """What a finished ``torch.distributed`` Work (``dist.all_reduce(t, async_op=True)``) or a done
    torch Future keeps in C++, where no Python reference shows it: a collective's tensors, a
    fork's value; what a finished ``multiprocessing.pool`` result keeps (``pool.apply_async(...)``
    kept and never ``get()``: its value, in a package the walk skips). None for anything else, and
    for one still running (reading it would wait)."""
    pool = sys.modules.get("multiprocessing.pool")
    if pool is not None and isinstance(obj, pool.ApplyResult):  # MapResult too
        return [getattr(obj, "_value", None)] if obj.ready() else None
    work = getattr(sys.modules.get("torch.distributed.distributed_c10d"), "Work", None)  # never imported here
    if not isinstance(obj, torch._C.Future) and (work is None or not isinstance(obj, work)):  # torch.futures.Future too
        return None
    try:
        fut = obj.get_future() if work is not None and isinstance(obj, work) else obj
        if not fut.done():
            return None
        value = fut.value()
    except Exception:  # a backend without futures, a future that failed
        return None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _captures(fn: Any, t: torch.Tensor) -> bool:
    return any(v is t for _, v in closure_items(getattr(fn, "__func__", fn)))


def cycle_of(t: torch.Tensor, saved_views: dict[int, str] | None = None) -> str:
    """How a tensor no variable holds may keep itself alive through autograd, or "".

    ``grad``: its ``.grad`` carries a graph (``backward(create_graph=True)``) that saved it.
    ``hook:fn``: a hook registered on it (``t.register_hook``) captures the tensor in its closure.
    ``ctx:Name``: its ``grad_fn`` is a custom Function's ctx that stores the tensor as an attribute.
    ``saved:Name``: it is a custom Function's output (or a view of one) and the Function saved a
    view of that output for backward: a cycle inside autograd's C++ graph, never freed
    (pytorch#94990); `saved_views`: id of such an output -> the Function's name, from the views
    saved on deep steps (`tagging.saved_view_of`).
    ``packed:hook``: the user's saved-tensor hooks (named by the unpack hook) packed it, an output
    of the node it is saved in, as itself (`_packed_live`)."""
    try:
        g = t.grad if t.is_leaf else None
    except (RuntimeError, AttributeError):
        g = None
    if g is not None and g.grad_fn is not None:
        return "grad"
    hooks = getattr(t, "_backward_hooks", None)
    if hooks:  # a tensor hook whose closure captures the tensor: tensor -> hooks -> closure -> tensor
        for fn in list(hooks.values())[:8]:
            if _captures(fn, t):
                return "hook:" + qualname(fn)
    gf = t.grad_fn
    if isinstance(gf, torch.autograd.function.BackwardCFunction):
        for v in vars(gf).values():
            if v is t or (isinstance(v, (tuple, list)) and any(x is t for x in v[:16])):
                name = type(gf).__name__
                return "ctx:" + name.removesuffix("Backward")
    for out in (t, t._base if t._is_view() else None):
        if saved_views and id(out) in saved_views:
            return "saved:" + saved_views[id(out)]
        hook = _packed_live(out)
        if hook:
            return "packed:" + hook
    return ""


def _packed_live(out: Any) -> str:
    """The unpack hook (its qualified name) of the user's saved-tensor hooks whose pack hook gave
    the graph node that made `out` the tensor itself, or a copy still attached to the node (no
    ``.detach()``), for an output the node saved: the node then holds what holds the node, a
    cycle in C++ that only a backward frees; "" otherwise."""
    gf = getattr(out, "grad_fn", None)
    if gf is None:
        return ""
    for name in dir(gf):
        if not name.startswith("_raw_saved_"):
            continue
        try:
            raw = getattr(gf, name)  # raises once a backward freed them
        except Exception:
            continue
        for st in raw[:8] if isinstance(raw, (list, tuple)) else [raw]:
            hook = getattr(st, "unpack_hook", None)
            if hook is None:
                continue  # no hooks: autograd keeps an output without its grad_fn
            try:
                data = st.data
            except Exception:
                continue
            for d in data[:8] if isinstance(data, (list, tuple)) else [data]:
                if d is out or _attached_to(d, gf):
                    return qualname(hook)
    return ""


def _attached_to(d: Any, node: Any) -> bool:
    """Whether tensor `d` was made from `node`'s output with the graph kept (``x.to("cpu")``)."""
    fn = getattr(d, "grad_fn", None) if isinstance(d, torch.Tensor) else None
    return fn is not None and any(f is node for f, _ in fn.next_functions)


def _where(frame: Any) -> str:
    return getattr(frame.f_code, "co_qualname", None) or frame.f_code.co_name


def _suspended_mark(frame: Any) -> str:
    return _COROUTINE_MARK if frame.f_code.co_flags & _CO_COROUTINE else _GENERATOR_MARK


def sampled_ends(items: list, each: int) -> tuple[list, float]:
    """`items`, or when there are more than `2 * each` of them, the first and last `each`; and the
    share of all that each one kept stands for (a long registry or chain walked at its ends)."""
    if len(items) <= 2 * each:
        return items, 1.0
    return items[:each] + items[-each:], len(items) / (2 * each)


def exception_frames(exc: BaseException, limit: int = 8) -> Iterator[tuple[Any, str, float]]:
    """(frame, note, weight) of the frames a caught exception's traceback keeps alive, with their
    locals: storing an exception keeps every frame it passed through, and every tensor those frames
    held. A long traceback is sampled at its ends, `limit` frames in all, each standing for its share:
    an instance raised again and again (a cached error re-raised each call) gains the frames of each
    raise in front of the ones before."""
    frames: dict[int, tuple[Any, str]] = {}  # id -> (frame, the name of the exception it was raised with)
    for e in (exc, exc.__cause__, exc.__context__):
        tb = getattr(e, "__traceback__", None)
        while tb is not None and len(frames) < _MAX_TRACEBACK:
            frames.setdefault(id(tb.tb_frame), (tb.tb_frame, type(e).__name__))
            tb = tb.tb_next
    kept, weight = sampled_ends(list(frames.values()), limit // 2)
    for f, raised in kept:  # a note for the frames walked only
        yield f, traceback_note(raised, _where(f)), weight


#: Traceback entries followed at most (each raise of a kept exception adds its frames).
_MAX_TRACEBACK = 100_000


def generator_frame(gen: Any) -> tuple[Any, str] | None:
    """(frame, holder suffix) of a suspended generator or coroutine: its locals live as long as it does.
    None for one that is running: its frame is this thread's (read with the stack) or another
    thread's, which is not read (holders._add_threads)."""
    f = getattr(gen, "gi_frame", None) or getattr(gen, "cr_frame", None)
    if f is None or getattr(gen, "gi_running", False) or getattr(gen, "cr_running", False):
        return None
    return f, f"{_suspended_mark(f)}{_where(f)})"


def frame_holder(frame: Any, target: Any, stack: set[int]) -> str:
    """Name of the local through which a frame that is not running (a suspended generator's, a
    traceback's) holds `target`: ``var (local of generator prefetch)``; "" when none does."""
    if id(frame) in stack:
        return ""
    loc = frame.f_locals
    try:
        name = next((k for k, v in loc.items() if v is target), None)
    finally:
        if type(loc) is dict and sys.getrefcount(loc) <= 3:
            loc.clear()  # before 3.13 reading f_locals leaves a snapshot that would hold every local
    if name is None:
        return ""
    if frame.f_code.co_flags & (_CO_GENERATOR | _CO_COROUTINE):
        return f"{name}{_suspended_mark(frame)}{_where(frame)})"
    return f"{name} (local of {_where(frame)}, a frame kept by a traceback)"


def stack_ids() -> set[int]:
    """Ids of the frames now running (their locals are the root walk's business)."""
    ids: set[int] = set()
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        ids.add(id(f))
        f = f.f_back
    return ids
