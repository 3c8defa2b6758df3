"""One budgeted, breadth-first walk of references: each object is visited by its type
(tensor, container, module, function, frame owner, plain object) and each tensor it meets is
tallied under its holder (`holder_stats`). `holders` picks the roots (`walk_roots`) and runs it.
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import types
import weakref
from typing import Any

import torch

from . import reach
from .frames import is_internal, is_locals_snapshot
from .graphs import Roots
from .holder_families import fold_families
from .holder_stats import HolderTally
from .hook_walk import HookWalk
from .identity import Ages, tensor_nbytes
from .local_aliases import fold_aliases
from .native import image_core
from .optimizer_params import optimizer_held
from .queued import queue_items
from .reach import closure_items, default_items, fn_name
from .stores import Region
from .walk_scope import (
    HOOK_DICTS,
    LRU_CACHES,
    MODULE_SKIP,
    NAMED_KEYS,
    OPAQUE,
    SCALARS,
    SEQ_SAMPLE,
    SEQUENCES,
    SIZED,
    TENSOR_HOOK_DICTS,
    atom,
    c_fields,
    c_note,
    callback_kind,
    child_holder,
    filled_slots,
    is_metric,
    is_ndarray,
    is_view_of,
    keyed_parts,
    named_by_class,
    opened_inside,
    pandas_managers,
    script_attributes,
    skipped,
    tensor_attrs,
    top_package,
)

_USER_CONTAINERS = (collections.UserDict, collections.UserList)


class Walk(HolderTally, HookWalk):
    """One walk from the roots. `holders` by name, `tensor_holder` by tensor id."""

    def __init__(
        self,
        *,
        step: int,
        exclude: set[int],
        ages: Ages,
        module_names: dict[int, str],
        budget: int = 6000,
        graph_cap: int = 3000,
        device_type: str | None = None,
        prev_roots: dict[str, Roots] | None = None,
    ):
        super().__init__(
            step=step, exclude=exclude, ages=ages, graph_cap=graph_cap, device_type=device_type, prev_roots=prev_roots
        )
        self.module_names = module_names
        self.budget = budget
        self.visited: set[int] = set()
        self.buffers: dict[str, list] = {}
        self.queue: collections.deque = collections.deque()
        self.snapshots: list[dict] = []  # f_locals snapshots of non-running frames read by the walk
        self.nodes = 0
        self.truncated = False
        self.regions: list[Region] = []  # source searched for a holder's storing line
        self.piled_hooks: dict[str, str] = {}  # holder -> why: captured by copies of one module hook
        self.instance_locals: dict[int, str] = {}  # id -> the local naming it (local_aliases.py)
        self.aliases: dict[str, str] = {}  # such a local -> the path of a container's item that is its object

    # -- queueing
    def push(self, obj: Any, path: str, holder: str | None, kind: str, weight: float = 1.0, note: str = "") -> None:
        if isinstance(obj, SCALARS) and atom(obj):
            return
        if (oid := id(obj)) in self.visited:  # a local's object, also an item among others of a container: named by it
            if (local := self.instance_locals.get(oid)) is not None and path.endswith("[...]"):
                self.aliases.setdefault(local, path)
            return
        self.queue.append((obj, path, holder, kind, weight, note))

    def add_root(self, obj: Any, name: str, kind: str, note: str = "") -> None:
        self.push(obj, name, name, kind, 1.0, note)

    def run(self, finish: bool = True) -> None:
        """Walk what is queued; then, with `finish`, total the holders (the walk is over)."""
        q = self.queue
        while q:
            if self.nodes >= self.budget:
                self.truncated = True
                break
            obj, path, holder, kind, weight, note = q.popleft()
            oid = id(obj)
            if oid in self.visited:
                continue
            self.visited.add(oid)
            self.nodes += 1
            try:
                self._visit(obj, path, holder, kind, weight, note)
            except Exception:  # a strange object (a proxy, a lazy attribute) is skipped, never fatal
                continue
        q.clear()
        if not finish:
            return
        for name, why in self.piled_hooks.items():
            # the hooks piling up are the cause, however the walk first reached what they keep
            if (st := self.holders.get(name)) is not None:
                st.kind, st.note = "piled_hook", why
        self._finish()
        fold_aliases(self, self.aliases)
        fold_families(self)

    # -- one object, by its type
    def _visit(self, obj, path, holder, kind, weight, note) -> None:
        t = type(obj)
        if issubclass(t, torch.Tensor):
            self._tensor(obj, holder or path, kind, weight, note)
            for p, h, v in tensor_attrs(obj, path, holder, self.exclude):
                self.push(v, p, h, kind, weight, note)
        elif issubclass(t, tuple) and hasattr(obj, "_fields"):  # a namedtuple: its fields are names
            for k, v in zip(obj._fields, obj, strict=False):
                self.push(v, f"{path}.{k}", child_holder(holder, path, k), kind, weight, note)
        elif t in SEQUENCES or issubclass(t, (list, tuple, collections.deque)):
            self._sequence(obj, path, holder, kind, weight, note)
        elif issubclass(t, dict):
            self._dict(obj, path, holder, kind, weight, note)
        elif issubclass(t, torch.nn.Module):
            self._module(obj, path, holder, kind, weight, note)
        elif isinstance(obj, (types.FunctionType, types.LambdaType)):
            self._function(obj, path, holder, kind, weight, note)
        elif isinstance(obj, (BaseException, types.GeneratorType, types.CoroutineType, types.FrameType)):
            self._frame_owner(obj, path, holder, kind, weight, note)
        elif isinstance(obj, types.MethodType):
            self.push(obj.__self__, path, holder, kind, weight, note)
        elif isinstance(obj, weakref.WeakKeyDictionary):
            # weak keys, strong values: a value that keeps its key alive keeps both while the dict lives
            self._sequence(list(obj.values()), path, holder, kind, weight, note)
        elif isinstance(obj, contextvars.ContextVar):  # its value in this thread's context
            self.push(obj.get(None), path, holder, kind, weight, note or f"the value of ContextVar {obj.name!r}")
        elif (queued := queue_items(obj)) is not None:  # what was put() and not yet taken, named by the queue
            self._sequence(queued[0], path, holder or path, queued[1], weight, note or queued[2])
        elif isinstance(obj, LRU_CACHES):
            self._lru_cache(obj, path, holder, weight, note)
        elif t.__name__ == "partial" and hasattr(obj, "func"):  # its function and the arguments bound to it
            for i, a in enumerate([obj.func, *obj.args, *obj.keywords.values()]):
                self.push(a, path + "[...]" * bool(i), holder, kind, weight, note)
        elif isinstance(obj, torch.optim.Optimizer):
            self._optimizer(obj, path, holder, weight, note)
        elif issubclass(t, (torch.UntypedStorage, torch.TypedStorage)):
            self._storage(obj, holder or path, kind, weight, note)
        elif t in SIZED:  # plain data that grows in place (`raw += chunk`) or is rebound
            self._buffer(obj, holder or path, kind, weight, note)
        elif t is memoryview or is_ndarray(t):
            self._view(obj, path, holder, kind, weight, note)
        elif (package := top_package(t)) == "pandas" and isinstance(getattr(obj, "_mgr", None), pandas_managers()):
            for arr in obj._mgr.arrays:  # a DataFrame's or Series' columns (an object column keeps its items)
                self.push(arr, path + "[...]", holder or path, kind, weight, note)
        elif isinstance(obj, torch.autograd.graph.Node):  # a graph kept without its tensor (a grad_fn)
            self._graph_node(obj, holder or path, kind, weight, note)
            if opened_inside(t):  # a custom Function's ctx: what it stores as attributes
                self._attrs(obj, path, holder, kind, weight, note)
        elif package == "PIL" and (core := image_core(obj)) is not None:
            self._image(obj, *core, holder or path, kind, weight, note)
        elif isinstance(obj, OPAQUE) or skipped(t):
            if (held := reach.async_result(obj)) is not None:  # a collective's Work, a torch Future
                self._sequence(held, path, holder or path, kind, weight, note)
            elif kind == "hook" or opened_inside(t):
                # a hook object and what it keeps (a pruning mask), an autograd ctx, a DataLoader...
                self._attrs(obj, path, holder, kind, weight, note)
        else:
            self._attrs(obj, path, holder, kind, weight, note)

    def _view(self, obj, path, holder, kind, weight, note) -> None:
        """An array or memoryview: it keeps the object whose memory it shares (``tensor.numpy()`` keeps the
        tensor's storage; a view of that array keeps the array), and an array of Python objects keeps its
        items. The garbage collector sees neither, so only this walk finds what such an array keeps."""
        base = obj.obj if type(obj) is memoryview else obj.base
        objects = getattr(getattr(obj, "dtype", None), "hasobject", False)  # an array of Python objects
        if isinstance(base, torch.Tensor):
            self.array_bases.add(id(base))
        elif type(obj) is not memoryview and not objects and not is_view_of(base):
            # an array with memory of its own (a copy, `np.stack`): tallied under its holder as a tensor is
            self._array(obj, holder or path, kind, weight, note)
        if base is not None:
            self.push(base, path, holder, kind, weight, note)
        if objects and getattr(obj, "size", 0):
            # its items, as a list's: an array made up front (``np.empty(n, dtype=object)``) and
            # filled in place shows its growth in the filled slots, not at its ends
            self._sequence(obj.ravel(), path, holder or path, kind, weight, note)

    def _lru_cache(self, fn, path, holder, weight, note) -> None:
        if kept := reach.lru_cache_items(fn):
            why = f"kept by the functools.lru_cache of {fn_name(fn)}(): each result, as long as the function lives"
            maxsize = fn.cache_info().maxsize
            if maxsize:  # a bounded cache (128 entries by default), as a deque's maxlen: each a key and a result
                self.bounds[id(kept)] = 2 * maxsize
            self._sequence(kept, path, holder or path, "lru_cache", weight, note or why)
            self.bounds.pop(id(kept), None)  # `kept` is made for this walk: its id may be another list's next

    def _optimizer(self, obj, path, holder, weight, note) -> None:
        """Its own extra lists, the parameters it keeps that are not the model's, and its hooks."""
        for k, v, hkind, why in optimizer_held(obj, self.exclude):
            self.push(v, f"{path}.{k}", child_holder(holder, path, k, value=v), hkind, weight, why)
        for hk, hooks in reach.optimizer_hook_dicts(obj):
            for fn, copies in reach.hooks_with_copies(hooks):
                self.hook(fn, path, weight, copies, hk)

    def _function(self, fn, path, holder, kind, weight, note) -> None:
        if holder is not None and "[...]" in path:  # a callback in a container: the container holds it
            kind, note = callback_kind(kind), note or f"captured by {fn_name(fn)}"  # its cells, default args
            for name, value in itertools.chain(closure_items(fn), default_items(fn)):
                self.push(value, f"{path}.{name}", holder, kind, weight, note)
            return
        for k, v in getattr(fn, "__dict__", {}).items():  # what code hung on it (`train_step.seen = []`)
            self.push(v, f"{path}.{k}", child_holder(holder, path, k), kind, weight, note)
        # reached by name: its cells are variables of the enclosing function (maybe long returned), named so
        for name, value in closure_items(fn):
            why = reach.closure_note(fn, name, path or None)
            if kind == "closure" and note:  # a function a hook's closure keeps: say whose (a chain of handlers)
                why += "; " + note.rpartition("; ")[2]
            self.push(value, name, reach.closure_holder(fn, name), "closure", weight, why)

    def _frame_owner(self, obj, path, holder, kind, weight, note) -> None:
        if isinstance(obj, types.FrameType):  # a frame kept as an object (inspect.stack(), sys._getframe())
            return self._frame(obj, path, holder or path, kind, weight, note or reach.kept_frame_note(obj))
        if isinstance(obj, BaseException):  # its traceback keeps the frames it passed through
            self._attrs(obj, path, holder, kind, weight, note)
            for f, why, share in reach.exception_frames(obj):
                self._frame(f, path, holder, kind, weight * share, why)
            return
        fr = reach.generator_frame(obj)
        if fr is not None and not is_internal(fr[0].f_code):
            # named by their own variables unless a container holds it; a coroutine's always (a task's)
            coroutine = isinstance(obj, types.CoroutineType)
            own = None if holder is not None and "[...]" in path and not coroutine else fr[1]
            what = "coroutine" if coroutine else "generator"
            self._frame(fr[0], path, holder, kind, weight, f"a local of a suspended {what}, reached as {path}", own)

    def _frame(self, f, path, holder, kind, weight, note, own: str | None = None) -> None:
        """A frame that is not running (a traceback's, a suspended generator's): its locals count
        under whatever holds the frame, or, with `own` (a holder suffix), under their own names."""
        loc = f.f_locals
        if is_locals_snapshot(f, loc):
            self.snapshots.append(loc)  # emptied after the walk, as walk_roots does for live frames
        for k, v in list(loc.items()):
            if k.startswith("__"):
                continue
            if own:
                self.push(v, k, k + own, "local", weight, note)
            else:
                self.push(v, f"{path}.{k}", holder or path, kind, weight, note)

    def _attrs(self, obj, path, holder, kind, weight, note) -> None:
        d = getattr(obj, "__dict__", None)
        kind = "metric_state" if is_metric(obj) else kind  # a metric that is no module (ignite's)
        if isinstance(d, dict):
            self._bound_children(obj, d, path)
            link = next((k for k, v in d.items() if type(v) is type(obj)), None)
            if link is not None:  # a node of a chain (a linked list's .prev, a tree's .parent)
                kind, note = "chain", note or f"kept along a chain of {type(obj).__name__} objects linked by .{link}"
            for k, v in d.items():
                if atom(v) or (k.startswith("__") and k.endswith("__")):
                    continue
                if k == link or (k == "data" and isinstance(obj, _USER_CONTAINERS)):
                    # the next node's attributes count under this one's names; a UserDict's (a tokenizer's
                    # BatchEncoding) items are its own: `seen[...]['logits']`, not `seen[...].data['logits']`
                    self.push(v, path, holder, kind, weight, note)
                    continue
                self.push(v, f"{path}.{k}", child_holder(holder, path, k, value=v), kind, weight, note)
        slots = getattr(type(obj), "__slots__", ())
        for k in (slots,) if isinstance(slots, str) else slots:
            v = getattr(obj, k, None)
            if v is not None:
                self.push(v, f"{path}.{k}", child_holder(holder, path, k, value=v), kind, weight, note)
        for v in c_fields(obj):  # an object of a C type (itertools.cycle, tee): its unnamed fields
            self.push(v, path + "[...]", holder or path, kind, weight, note or c_note(obj))

    # -- containers: long ones are sampled at both ends
    def _sequence(self, obj, path, holder, kind, weight, note) -> None:
        n = len(obj)
        if n == 0:
            return
        self._note_bound(obj, n, holder or path, path + reach.suffix(holder))
        filled = filled_slots(obj) if n > 2 * SEQ_SAMPLE else None  # slots filled in place: not their ends
        if not filled and self._plain_data(obj, holder or path, kind, weight, note):  # sized, not walked
            return
        child = path + "[...]"
        if filled is not None:
            if not filled:  # placeholders only: nothing that could hold a tensor
                return
            # slots allocated up front (``[0] * n``, ``[None] * n``) and filled in place: sample
            # the filled ones, or the placeholders at the ends would hide the growth in the middle
            items = filled if len(filled) <= 2 * SEQ_SAMPLE else filled[:SEQ_SAMPLE] + filled[-SEQ_SAMPLE:]
            if len(items) < len(filled):
                self._estimated(holder or path)
            self._name_unsampled(filled, holder or path)
        elif n <= 2 * SEQ_SAMPLE or isinstance(obj, (set, frozenset)):
            items = list(obj)[: 4 * SEQ_SAMPLE]
        else:
            if isinstance(obj, collections.deque):
                items = [obj[i] for i in range(SEQ_SAMPLE)] + [obj[-i] for i in range(1, SEQ_SAMPLE + 1)]
            else:
                items = list(obj[:SEQ_SAMPLE]) + list(obj[-SEQ_SAMPLE:])
            self._long_sampled(obj, items, holder or path)
        w = weight * (n if filled is None else len(filled)) / len(items)  # each item sampled stands for this many
        by_class = n <= NAMED_KEYS and len(items) == n and named_by_class(items)  # a trainer's callbacks
        for it in items:
            p = f"{path}[{type(it).__name__}]" if by_class else child
            self.push(it, p, child_holder(holder, path, None, p) if by_class else holder or path, kind, w, note)

    def _dict(self, obj, path, holder, kind, weight, note) -> None:
        n = len(obj)
        if n == 0 or (not keyed_parts(obj) and self._plain_data(obj, holder or path, kind, weight, note)):
            return
        self._note_bound(obj, n, holder or path, path + reach.suffix(holder))
        named = n <= NAMED_KEYS
        if n <= 2 * SEQ_SAMPLE:
            items = list(obj.items())
        else:
            keys = list(obj.keys())
            items = [(k, obj[k]) for k in keys[:SEQ_SAMPLE] + keys[-SEQ_SAMPLE:]]
            self._long_sampled(obj.values(), [v for _, v in items], holder or path)
        w = weight * n / len(items)
        for k, v in items:
            if named and isinstance(k, str):
                p = f"{path}[{k!r}]"
                self.push(v, p, child_holder(holder, path, None, p), kind, w, note)
            else:
                self.push(v, path + "[...]", holder or path, kind, w, note)
                if isinstance(k, torch.Tensor):
                    self.push(k, path + "[...]", holder or path, kind, w, note)

    # -- nn.Module: attributes, buffers, hooks, children
    def _module(self, mod, path, holder, kind, weight, note) -> None:
        name = self.module_names.get(id(mod))
        if name is not None:  # part of the tracked model: name it by its module path
            path, kind, holder = name, "module_attr", None
        kind = "metric_state" if is_metric(mod) else kind  # torchmetrics' Metric, on the model or not
        d = mod.__dict__
        for k, v in [*d.items(), *script_attributes(mod)]:  # a scripted module's C++ attributes too
            if k in MODULE_SKIP or atom(v):
                continue
            p = f"{path}.{k}" if path else k
            self.push(v, p, child_holder(holder, path, k), kind, weight, note)
        for k, b in d.get("_buffers", {}).items():
            if b is not None:
                p = f"{path}.{k}" if path else k
                self.buffers[p] = [int(b.numel()), tensor_nbytes(b)[1]]
                if b.grad_fn is not None:  # a running statistic updated with grad: it carries its graph
                    self.push(b, p, child_holder(holder, path, k), kind, weight, note)
        if name is None:
            # outside the tracked model (in a list, a cache): its parameters and buffers are its holder's
            for k, prm in [*d.get("_parameters", {}).items(), *d.get("_buffers", {}).items()]:
                if prm is not None:
                    p, h = f"{path}.{k}" if path else k, child_holder(holder, path, k)
                    self.push(prm, p, h, kind, weight, note)
                    if prm.grad_fn is None and prm.grad is not None:  # its gradient is kept with it
                        self.push(prm.grad, p, h, kind, weight, note)
        where = path or type(mod).__name__
        for hk in HOOK_DICTS:
            for fn, copies in reach.hooks_with_copies(d.get(hk)):
                self.hook(fn, where, weight, copies, hk)
        tensors = itertools.chain(d.get("_parameters", {}).items(), d.get("_buffers", {}).items())
        for k, prm in tensors:
            for hk in TENSOR_HOOK_DICTS:  # `param.register_hook(...)`: lives as long as the parameter
                for fn, copies in reach.hooks_with_copies(getattr(prm, hk, None)):
                    self.hook(fn, f"{where}.{k}", weight, copies, hk)
            attrs = getattr(prm, "__dict__", None)  # what code hung on it (`p.seen = []`): not cached in forward
            pkind = "param_attr" if kind == "module_attr" else kind
            for a, v in list(attrs.items()) if attrs else ():
                if not atom(v) and not a.startswith("__"):
                    p = f"{path}.{k}.{a}" if path else f"{k}.{a}"
                    self.push(v, p, child_holder(holder, path, k, full=p), pkind, weight, note)
        for k, child in d.get("_modules", {}).items():
            if child is not None:
                cp = f"{path}.{k}" if path else k
                h = None if self.module_names.get(id(child)) else child_holder(holder, path, k)
                self.push(child, cp, h, kind, weight, note)
