"""Containers of plain Python data: how many items a list, deque, set or dict keeps that are not
tensors nor arrays (numbers, strings, lists of floats, dicts of numbers), and about how many bytes
they take, from a bounded deep ``sys.getsizeof`` of a few items at its ends scaled by its length.

A training loop that keeps ``out.tolist()`` or decoded strings every step leaks host memory that no
tensor count sees; the walk (`walk.Walk`) sizes such a container here instead of walking into it,
since plain data can hold no tensor.
"""

from __future__ import annotations

import array
import collections
import io
import itertools
import sys
from typing import Any

import torch

#: Items at each end of a container that are sized (as the walk samples tensors: walk_scope.SEQ_SAMPLE).
ENDS = 12
#: Objects one sampled item may consist of before it is not sized (then the walk walks it).
ITEM_BUDGET = 100
#: Of a long container inside an item, the items sized (the rest scaled from them).
INNER = 8
_CONTAINERS = (list, tuple, set, frozenset, collections.deque, dict)
#: Buffers of plain data (a BytesIO kept per step: a ``torch.save`` into memory; a StringIO a
#: logging handler writes to). Held by themselves, outside a container, the walk sizes them too
#: (`Walk._visit`): they grow in place (`raw += chunk`).
BUFFERS = (bytearray, io.BytesIO, array.array, io.StringIO)
#: Scalars, and those buffers.
_LEAVES = (float, complex, str, bytes, *BUFFERS)


def _leaf_size(obj) -> int:
    """One scalar's bytes; shared singletons (None, booleans, small ints) take none of their own."""
    t = type(obj)
    if obj is None or t is bool or (t is int and -5 <= obj <= 256):
        return 0
    if t is io.StringIO:  # its size leaves out its text: a character a byte at least, up to where it was written
        try:
            return sys.getsizeof(obj) + obj.tell()
        except ValueError:  # closed: its text is gone
            return sys.getsizeof(obj)
    return sys.getsizeof(obj)


def item_size(obj, budget: int = ITEM_BUDGET) -> int | None:
    """The bytes of `obj` when it is plain data (scalars, builtin containers of them and records of
    them, nested: `record_fields`), else None: something else (a tensor, an array, an object that
    keeps more than its attributes) or more than `budget` objects
    to look at. Long inner containers are sized from their first INNER items. A class counts
    nothing, and so do the keys of a dict that are strings: they are most often shared literals ("loss", "acc")."""
    stack: list[tuple[Any, float]] = [(obj, 1.0)]
    total = 0.0
    while stack:
        o, scale = stack.pop()
        budget -= 1
        if budget < 0:
            return None
        t = type(o)
        if o is None or t is bool or t is int or t in _LEAVES:
            total += scale * _leaf_size(o)
            continue
        if isinstance(o, type):  # a class named in a key (the warnings registry's): shared, none of its own
            continue
        if t not in _CONTAINERS:
            record = record_fields(o)
            if record is None:
                return None
            total += scale * record[0]
            stack.extend((v, scale) for v in record[1])
            continue
        total += scale * sys.getsizeof(o)
        n = len(o)
        if not n:
            continue
        it = o.items() if t is dict else o
        sample = list(itertools.islice(it, INNER))
        s = scale * n / len(sample)
        for x in sample:
            if t is dict:
                k, x = x
                if type(k) is not str:
                    stack.append((k, s))
            stack.append((x, s))
    return int(total)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not one of C
#: Classes whose instances are never plain records, whatever their attributes: they keep more than
#: their attributes (a traceback, a storage) or are code.
_NOT_RECORDS: tuple[type, ...] = (BaseException, type, torch.Tensor, torch.nn.Module)
#: C bases a record may have: they keep a value of their own (an IntEnum's), nothing that could hold a tensor.
_SCALAR_BASES = (object, int, float, complex, str, bytes)
_POINTER = 8  # bytes: an instance's __dict__ and __weakref__ pointers, and each slot, take one


def record_fields(obj) -> tuple[int, list] | None:
    """(its own bytes: the object and its ``__dict__``; the values of its attributes: its
    ``__dict__``'s and its slots') of an instance of a Python class that keeps nothing but its
    attributes (a ``logging.LogRecord``, a dataclass row, a metric's child with a count list). None
    for anything else: a builtin or C type (a function, a generator), a tensor, a module, an exception."""
    t = type(obj)
    if not t.__flags__ & _HEAPTYPE or issubclass(t, _NOT_RECORDS):
        return None
    if any(not c.__flags__ & _HEAPTYPE and c not in _SCALAR_BASES for c in t.__mro__):
        return None  # what a C base keeps is not in its attributes: a namedtuple's items, a dict subclass's
    slots = [name for c in t.__mro__ for name in _slot_names(c) if name not in ("__dict__", "__weakref__")]
    c_base = max(c.__basicsize__ for c in t.__mro__ if not c.__flags__ & _HEAPTYPE)
    if t.__basicsize__ > c_base + _POINTER * (2 + len(slots)):
        return None  # a C++ object behind a class made at run time (pybind11's: a c10d Work, its tensors)
    values: list = []
    shell = sys.getsizeof(obj)
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        own = None
    except Exception:  # a proxy that answers attributes itself
        return None
    if own is not None:
        if type(own) is not dict:
            return None
        values.extend(own.values())
        shell += sys.getsizeof(own)
    for name in slots:
        if name.startswith("__"):  # a private slot, stored under a mangled name
            return None
        try:
            values.append(object.__getattribute__(obj, name))
        except AttributeError:  # not set yet
            continue
    return shell, values


def _slot_names(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def data_size(obj) -> tuple[int, int] | None:
    """(items, estimated bytes) of a non-empty list, tuple, deque, set or dict whose sampled
    items (ENDS at each end; a dict's keys and values) are all plain data, else None."""
    n = len(obj)
    if isinstance(obj, dict):
        items = dict.items(obj)  # never a subclass's own __getitem__ or items()
        pairs = list(items) if n <= 2 * ENDS else [*itertools.islice(items, ENDS), *_last(items, ENDS)]
        sample: list = [v for _, v in pairs] + [k for k, _ in pairs if type(k) is not str]
        sampled = len(pairs)
    else:
        if isinstance(obj, (set, frozenset)):
            sample = list(itertools.islice(obj, 2 * ENDS))
        elif n <= 2 * ENDS:
            sample = list(obj)
        else:
            sample = [obj[i] for i in range(ENDS)] + [obj[-i] for i in range(ENDS, 0, -1)]
        sampled = len(sample)
    total = 0
    for x in sample:
        size = item_size(x)
        if size is None:
            return None
        total += size
    return n, int(sys.getsizeof(obj) + total * n / max(1, sampled))


def _last(items, k: int) -> list:
    """The last `k` items of a dict's items, without listing all of them."""
    return list(itertools.islice(reversed(items), k))[::-1]
