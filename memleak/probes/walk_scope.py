"""What the reference walk enters, skips and samples, and how it names a child's holder.

Split from `holders` (the reference walk), whose `Walk` applies these rules.
"""

from __future__ import annotations

import collections
import functools
import gc
import itertools
import sys
import types
import warnings
import weakref
from typing import Any

import torch

from . import reach
from .pydata import BUFFERS

# Packages whose objects are not walked into (their tensors are their business).
SKIP_PACKAGES = {
    "torch",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "memleak",
    "builtins",
    "_pytest",
    "pytest",
    "pluggy",
    "logging",
    "typing",
    "collections",
    "functools",
    "threading",
    "multiprocessing",
    "asyncio",
    "importlib",
    "abc",
    "enum",
    "re",
    "io",
    "weakref",
    "inspect",
    "ast",
    "tokenize",
    "unittest",
    "hypothesis",
    "IPython",
    "ipykernel",
    "jupyter_client",
    "tornado",
    "zmq",
    "_io",
    "sre_compile",
    "pathlib",
    "os",
    "sys",
    "socket",
    "ssl",
    "json",
    "pickle",
    "random",
    "argparse",
    "tqdm",
    "PIL",
    "sklearn",
}
SCALARS = (type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis))
# Text from this length is sized where it is held, as a buffer is (`log_text += line` every step
# grows one string); shorter text is names and settings.
LONG_TEXT = 16 * 1024
TEXTS = (str, bytes)
SIZED = (*BUFFERS, *TEXTS)  # one object of plain data the walk sizes where it is held
SEQUENCES = (list, tuple, collections.deque, set, frozenset)
# functools.lru_cache's C wrapper (the pure-Python fallback keeps its cache in a closure cell)
LRU_CACHES: tuple[type, ...] = tuple(t for t in (getattr(functools, "_lru_cache_wrapper", None),) if t)
HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
)
# A tensor's own hook dicts (`t.register_hook`, `t.register_post_accumulate_grad_hook`).
TENSOR_HOOK_DICTS = ("_backward_hooks", "_post_accumulate_grad_hooks")
MODULE_SKIP = {
    "_parameters",
    "_buffers",
    "_modules",
    "_non_persistent_buffers_set",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
    "_is_full_backward_hook",
    "training",
    "_compiled_call_impl",
    *HOOK_DICTS,
}
# Long containers are sampled at both ends (newest last), and their totals extrapolated.
SEQ_SAMPLE = 12
# ...but every tensor in them, up to this many, is mapped to its holder by id.
NAME_ALL_UP_TO = 100_000
# A dict of up to this many string keys names what it holds by key (``log['loss']``).
NAMED_KEYS = 16
_PARTS = (list, dict, collections.deque, set)


def keyed_parts(d: dict) -> bool:
    """Whether a dict is a record of named containers, each its own holder (``history['loss']``,
    ``history['text']``) even when all of it is plain data: sized whole, the part that grows would
    go unnamed."""
    return len(d) <= NAMED_KEYS and any(isinstance(v, _PARTS) for v in d.values()) and all(type(k) is str for k in d)


def top_package(obj_type: type) -> str:
    return (getattr(obj_type, "__module__", None) or "builtins").partition(".")[0]


def library_classes(classes: list[type]) -> list[type]:
    """The classes of `classes` (and their bases below nn.Module) that torch or another library
    defines: code of the user's can hang a class-level list on one (``nn.Linear.seen = []`` in a
    debugging hook). The user's own classes are read with their module's globals."""
    found: dict[int, type] = {}
    for cls in classes:
        for base in cls.__mro__:
            if base is torch.nn.Module:
                break
            if top_package(base) in SKIP_PACKAGES:
                found.setdefault(id(base), base)
    return list(found.values())


#: Iterators of builtin containers (``iter(x)``, ``zip``, ``map``, ``enumerate``, ``reversed``,
#: ``filter``): C objects that keep what they iterate over. Builtins are skipped, these are not: an
#: ``itertools.chain`` wrapped around the last one each step keeps every item through them.
_EMPTY_ITERATORS: tuple[Any, ...] = (
    iter(()),
    iter([]),
    reversed([]),
    iter({}),
    iter({}.values()),
    iter({}.items()),
    iter(set()),
)
_BUILTIN_ITERATORS = frozenset(map(type, _EMPTY_ITERATORS)) | {zip, map, enumerate, filter}


#: Attribute names that state the bound of the containers beside them (a replay memory's
#: ``capacity``, a cache's ``max_size``): names of containers' bounds only, not of lengths or steps.
BOUND_NAMES = ("capacity", "maxlen", "max_size", "maxsize", "buffer_size", "memory_size", "cache_size", "max_entries")


def named_by_class(items: list) -> bool:
    """Whether a short sequence's items are objects of distinct classes of the user's (a trainer's
    callbacks, a list of metrics): each is then named by its class (``callbacks[Logger].buffer``),
    as a short dict's values are by key, so the one that grows is named, not the list. Items of one
    class (a record per step) stay the sequence's: its length is what grows."""
    kinds = [type(it) for it in items]
    return len(kinds) >= 2 and len(set(kinds)) == len(kinds) and all(_user_object(t) for t in kinds)


def _user_object(t: type) -> bool:
    """An instance of a class of the user's with attributes of its own (not a tensor, a container or a
    type of a package the walk skips)."""
    return t.__dictoffset__ != 0 and not skipped(t) and not issubclass(t, (torch.Tensor, dict, list, tuple, type))


def owner_bound(attrs: dict) -> int | None:
    """The bound an object's attributes state for its containers (the first of BOUND_NAMES that is
    a positive int), else None."""
    for name in BOUND_NAMES:
        v = attrs.get(name)
        if type(v) is int and v > 0:
            return v
    return None


def index_bounds(obj: Any, attrs: dict) -> list[tuple[dict, int]]:
    """The dicts of a map-style Dataset keyed by sample index (a memo filled in ``__getitem__``:
    ``self.cache[i] = sample``), each with the dataset's length: ints in ``range(len(dataset))``
    are at most that many keys, however long the run. Their first and last keys are looked at;
    the dataset's ``__len__`` (the user's code) is called only where such a dict is there."""
    if not isinstance(obj, torch.utils.data.Dataset):
        return []
    memos = [(v, top) for v in attrs.values() if type(v) is dict and v and (top := _top_index(v)) is not None]
    if not memos:
        return []
    try:
        n = len(obj)  # type: ignore[arg-type]
    except Exception:  # an iterable-style dataset: no index space
        return []
    if type(n) is not int:
        return []
    return [(v, n) for v, top in memos if len(v) <= n and top < n]


def _top_index(d: dict) -> int | None:
    """The largest of `d`'s first and last keys when all of them are ints of 0 or more, else None."""
    ends = list(itertools.chain(itertools.islice(d, 8), itertools.islice(reversed(d), 8)))
    return max(ends) if all(type(k) is int and k >= 0 for k in ends) else None


def skipped(t: type) -> bool:
    """Whether the walk leaves objects of type `t` unopened: a type of a package it skips (the
    iterators of builtin containers aside)."""
    return top_package(t) in SKIP_PACKAGES and t not in _BUILTIN_ITERATORS


def c_fields(obj) -> list:
    """What an object of a C type keeps in fields that have no names, as the garbage collector
    sees them: ``itertools.cycle`` keeps every item it has yielded (to replay them), ``itertools.tee``
    the items one of its iterators has not read yet. Empty for an object with a ``__dict__`` or
    ``__slots__`` (its fields have names) and for the types of the packages the walk skips."""
    t = type(obj)
    if hasattr(obj, "__dict__") or getattr(t, "__slots__", None) or skipped(t):
        return []
    if t is _TEE:
        unread = tee_unread(obj)
        if unread is not None:
            return unread
    return [r for r in gc.get_referents(obj) if r is not t]


_TEE: type = type(itertools.tee(())[0])


def tee_unread(tee) -> list | None:
    """What one copy of an ``itertools.tee`` has not read yet: the items of its block from its
    position on, and the blocks after it (with the source iterator). The copies share the blocks,
    so the copy that lags keeps what the others have read, and the one that is ahead keeps next
    to nothing: naming the walk's first copy would name the wrong one. None where Python no longer
    tells a copy's position (``__reduce__``, deprecated in 3.12, gone in 3.14)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            data, index = tee.__reduce__()[2]
            source, values, nxt = data.__reduce__()[1]
    except Exception:  # any failure falls back to the fields the collector sees
        return None
    return [*values[index:], *(x for x in (nxt, source) if x is not None)]


def c_note(obj) -> str:
    t = type(obj)
    return (
        f"kept inside a {t.__module__}.{t.__qualname__}, an object of a C type that keeps items in fields of its "
        "own (itertools.cycle saves every item it yields, to replay them; tee what one copy has not read yet)"
    )


#: The containers code fills: a holder of its own even as an item of another; empty, a slot not filled yet.
CONTAINERS = (list, dict, set, collections.deque)


def child_holder(
    holder: str | None, path: str, key: str | None, full: str | None = None, value: Any = None
) -> str | None:
    """The holder for a child: the parent's holder while it is a named chain, else unchanged; and
    a container kept by an object inside a container (`value`: a callback's list in a trainer's
    list of callbacks), named through it: ``self.callbacks[...].preds``."""
    if holder is None:
        return None
    child = full if full is not None else (f"{path}.{key}" if path else key)
    assert child is not None  # callers pass a key or a path
    # a holder stays the nearest *named* owner: extend it only along names, never past an index,
    # unless what the name leads to is a container of its own (the growth is in it, not in the outer one)
    named = "[...]" not in child or type(value) in CONTAINERS
    return child + reach.suffix(holder) if named else holder


def tensor_attrs(t: torch.Tensor, path: str, holder: str | None, exclude: set[int]) -> list[tuple]:
    """What code hung on a tensor (`out.prev = last`, `x.meta = {...}`), as (path, holder, value),
    read from the dict the garbage collector sees (`t.__dict__` would make one for every tensor the
    walk meets). A tensor hung on a tensor counts under the same holder: a chain of them is one
    holder that grows. The model's own tensors are read with their module (walk._module)."""
    d = next((r for r in gc.get_referents(t) if type(r) is dict), None) if id(t) not in exclude else None
    return [
        (f"{path}.{k}", holder if isinstance(v, torch.Tensor) else child_holder(holder, path, str(k), value=v), v)
        for k, v in (d or {}).items()
        if not isinstance(v, SCALARS) and not str(k).startswith("__")
    ]


def atom(v: Any) -> bool:
    """Nothing the walk looks into: a scalar, or text shorter than LONG_TEXT."""
    return isinstance(v, SCALARS) and not (isinstance(v, TEXTS) and len(v) >= LONG_TEXT)


def filled_slots(seq) -> list | None:
    """The items of a long list, tuple or deque that are not placeholders (None, a number, a
    string, an empty list or dict), when an end of it is one: slots allocated up front and filled
    in place (``[0] * n``, ``[[] for _ in range(n)]``), whose filled part the ends do not show.
    None for an ordinary sequence (or one too long to scan)."""
    if isinstance(seq, (set, frozenset)) or len(seq) > NAME_ALL_UP_TO:
        return None
    if not (_placeholder(seq[0]) or _placeholder(seq[-1])):
        return None
    filled = [x for x in seq if not _placeholder(x)]
    return filled if len(filled) < len(seq) else None


def _placeholder(x: Any) -> bool:
    # an empty container is a slot not filled yet (a bucket per epoch or class made up front)
    return isinstance(x, SCALARS) or (type(x) in CONTAINERS and not x)


@functools.cache
def pandas_managers() -> tuple[type, ...]:
    """Looked up once a pandas object is met (pandas is then loaded), never imported otherwise."""
    try:  # the column store of a DataFrame and a Series (pandas >= 1.x)
        from pandas.core.internals import BlockManager, SingleBlockManager
    except Exception:
        return ()
    return (BlockManager, SingleBlockManager)


def is_ndarray(t: type) -> bool:
    """A numpy array type (never imports numpy: an array exists only once numpy is loaded)."""
    np = sys.modules.get("numpy")
    return np is not None and issubclass(t, np.ndarray)


def is_view_of(base: Any) -> bool:
    """Whether an array's `base` is where its memory is counted (an array, a memoryview, a tensor)."""
    return base is not None and (type(base) is memoryview or is_ndarray(type(base)) or isinstance(base, torch.Tensor))


#: Objects whose insides are never walked: code, classes, modules, weak references.
OPAQUE = (types.ModuleType, type, types.CodeType, types.GeneratorType, weakref.ref)


def callback_kind(kind: str) -> str:
    """The kind of what a function kept in a container captures (a list of callbacks, each a lambda
    or closure over tensors): "callback", where the container was a plain variable, attribute or
    global (a hook object, a thread's arguments, a cache keep their own kind and fix)."""
    return "callback" if kind in ("local", "global", "class_attr", "module_attr", "closure") else kind


def script_attributes(mod: Any) -> list[tuple[str, Any]]:
    """A scripted module's attributes of tensors that its C++ object keeps, not its ``__dict__`` (a
    ``List[Tensor]`` its forward appends to): each read gives a Python copy of the same tensors."""
    if not isinstance(mod, torch.jit.RecursiveScriptModule):
        return []
    try:
        attrs = mod._concrete_type.get_attributes()
    except Exception:  # a module scripted by another torch version: its attributes unread
        return []
    out = []
    for name, (typ, is_param) in attrs.items():
        if not is_param and "Tensor" in str(typ) and name not in mod._buffers:
            try:
                out.append((name, getattr(mod, name)))
            except Exception:
                continue
    return out


def is_metric(mod: Any) -> bool:
    """A metric (torchmetrics' Metric, ignite's, or any object with update, compute and reset): its
    states keep every update until reset()."""
    return all(callable(getattr(type(mod), m, None)) for m in ("update", "compute", "reset"))


def opened_inside(t: type) -> bool:
    """Whether an object of a skipped package (torch, logging) is still walked: an autograd ctx (it
    may store tensors), a DataLoader or Dataset (its dataset may cache tensors), a Subset, a
    distribution (its parameters: the user's tensors, with their graphs), an LR scheduler (what
    code hangs on it), a ChainMap, a logger and its handlers and records..."""
    return (
        issubclass(t, torch.autograd.function.BackwardCFunction)
        or t.__module__.startswith(_OPENED_MODULES)
        or _is_logging_holder(t)
    )


#: Modules of skipped packages whose objects hold the user's tensors or what code hangs on them
#: (torch's; collections' ChainMap, UserDict and UserList keep what they hold in attributes).
_OPENED_MODULES = ("torch.utils.data", "torch.distributions", "torch.optim.lr_scheduler", "collections")


def _is_logging_holder(t: type) -> bool:
    """A logger, a handler or a log record: a buffering handler (``logging.handlers.MemoryHandler``)
    keeps every record, and a record keeps its arguments (``log.debug("loss %s", loss)``)."""
    logging = sys.modules.get("logging")
    # logging's own types only: another package's handler (pytest's, which keeps every record of
    # a test) stays skipped with its package
    return (
        logging is not None
        and t.__module__.partition(".")[0] == "logging"
        and issubclass(t, (logging.Logger, logging.Handler, logging.LogRecord))
    )
