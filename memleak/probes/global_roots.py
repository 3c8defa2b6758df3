"""Module globals as walk roots: which modules' globals the walk reads (the frames', then the user
modules and functions they name, then those defining the model's classes), and what of them:
variables, the state of the functions a module defines, the class-level containers of its classes.

Split from `holders`, which picks the other roots and runs the walk.
"""

from __future__ import annotations

import collections
import sys
import types
from typing import Any

import torch

from . import reach
from .frames import is_user_file
from .reach import closure_items, default_items
from .walk import Walk
from .walk_scope import LRU_CACHES, SKIP_PACKAGES, top_package

#: Module globals walked at most, besides those of the frames themselves.
MAX_GLOBALS = 12


def add_root(w: Walk, later: list, loops: frozenset[str], obj: Any, name: str, kind: str, note: str = "") -> None:
    """`obj` as a root named `name`; a loop variable's (in `loops`) into `later`, walked once all else was."""
    if name in loops:
        later.append((obj, name, kind, note))
    else:
        w.add_root(obj, name, kind, note)


def add_all_globals(
    w: Walk, globals_list: list[dict], frames: list, loops: dict[int, frozenset[str]], later: list
) -> None:
    """Each module's globals (`loops`: the loop variables of the module code running, by id of its
    globals); another module's than the frames' own are named after it (`fastlog._BUFFER`), and its
    file is searched for the lines that store into them."""
    own = {id(f.f_globals) for f in frames}
    for g in globals_list:
        add_globals(w, g, loops.get(id(g), frozenset()), later, "" if id(g) in own else g.get("__name__", ""))
    w.regions += [(g["__file__"], 1, 1 << 30) for g in globals_list if id(g) not in own and g.get("__file__")]


def add_globals(w: Walk, g: dict, loops: frozenset[str], later: list, module: str = "") -> None:
    """A module's globals as roots: its variables (`loops`, the loop variables of its code that is
    running, into `later`), the state of the functions and the class-level containers it defines.
    `module`: the name its variables are named after (none for the running code's own module)."""
    modname = g.get("__name__", "")
    for k, v in list(g.items()):
        if isinstance(v, types.FunctionType) and v.__module__ == modname:
            add_function_state(w, k, v)
            continue
        if k.startswith("__") or isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            continue
        if isinstance(v, type):
            if v.__module__ == modname:  # a class defined there: its class-level containers
                add_class_containers(w, k, v)
            continue
        add_root(w, later, loops, v, f"{module}.{k}" if module else k, "global")


def add_function_state(w: Walk, name: str, fn: types.FunctionType) -> None:
    _add_mutable_defaults(w, name, fn)
    for var, value in closure_items(fn):  # a decorator's state lives in its wrapper's cells
        w.push(value, var, reach.closure_holder(fn, var), "closure", 1.0, reach.closure_note(fn, var, name))
    for k, v in list(vars(fn).items()):  # what code hung on it (`train_step.last = {}`), not `__wrapped__`
        if not k.startswith("__"):
            w.add_root(v, f"{name}.{k}", "global")


def _add_mutable_defaults(w: Walk, name: str, fn: types.FunctionType) -> None:
    for arg, default in default_items(fn):  # a mutable default lives as long as the function
        if isinstance(default, (torch.Tensor, list, dict, collections.deque, set)):
            w.add_root(default, f"{name}.{arg}", "default_arg")


def add_class_containers(w: Walk, name: str, cls: type) -> None:
    for ck, cv in list(vars(cls).items()):
        if isinstance(cv, LRU_CACHES):  # a method (even __getitem__) cached with functools.lru_cache
            w.add_root(cv, f"{name}.{ck}", "lru_cache")
        elif isinstance(fn := getattr(cv, "__func__", cv), types.FunctionType):  # `def forward(self, x, seen=[])`
            _add_mutable_defaults(w, f"{name}.{ck}", fn)
        elif not ck.startswith("__") and isinstance(cv, (torch.Tensor, list, dict, collections.deque, set, tuple)):
            w.add_root(cv, f"{name}.{ck}", "class_attr")


def user_globals(frames: list, classes: list[type]) -> list[dict]:
    """The frames' globals; then those of the user modules and functions the frames name (a
    train_step defined in utils.py keeps its globals there); then those of the modules that
    define the model's classes (`classes`). Each once, in that order."""
    found: dict[int, dict] = {}
    for f in frames:
        found.setdefault(id(f.f_globals), f.f_globals)
    for f in frames:
        for v in list(f.f_locals.values()) + ([] if f.f_locals is f.f_globals else list(f.f_globals.values())):
            if len(found) >= MAX_GLOBALS:
                break
            g = user_globals_of(v)
            if g is not None:
                found.setdefault(id(g), g)
    for cls in classes:
        g = getattr(sys.modules.get(cls.__module__), "__dict__", None)
        if g is not None and id(g) not in found and top_package(cls) not in SKIP_PACKAGES:
            found[id(g)] = g
    return list(found.values())


def user_globals_of(v: Any) -> dict | None:
    """The globals of a user module (utils, engine), or of the module of a user function, class or
    object that a frame names (a class imported from registry.py keeps its class-level lists there;
    the methods that fill an object's lists are in its class's file)."""
    if not isinstance(v, (type, types.ModuleType, types.FunctionType, types.MethodType)):
        v = type(v)  # an object of a user class (a registry imported from utils.py): its module's
    if isinstance(v, type):
        v = sys.modules.get(v.__module__)
    if isinstance(v, types.ModuleType):
        g, filename = vars(v), getattr(v, "__file__", None) or ""
    else:
        fn = getattr(v, "__func__", v)
        if not isinstance(fn, types.FunctionType):
            return None
        g, filename = fn.__globals__, fn.__code__.co_filename
    return g if filename and is_user_file(filename) else None
