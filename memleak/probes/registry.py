"""Modules whose registered entries change in number: a container that gains a submodule or a
parameter on every step (`self.heads[f"head_{step}"] = nn.Linear(...)` inside forward), or a
module that gains a hook on every step (`register_forward_hook` inside the loop, its handle
dropped: each step runs every hook registered so far).

Such parameters are no survivors and no attribute the walk names (both leave out parameters and
submodules by identity), and the memory categories only say that parameters grow. On each detail
step the ModuleProbe counts, for every module of the model, its direct submodules, parameters and
buffers, and writes a `RegisteredRow` for each module whose count differs from the one it had
when first seen. Only paths and counts are kept (no reference to a module), bounded in number.

A module whose own parameters and gradients grow in bytes while it registers nothing new gets a
row too (`grew` "tensors"): a sparse gradient never zeroed (``nn.Embedding(sparse=True)``
accumulates each step's rows by concatenation), a parameter replaced by a larger tensor each step
(``p.data = torch.cat([p.data, rows])``). The walk leaves both out, as the model's own.
"""

from __future__ import annotations

import os
import sys

import torch

from ..records import RegisteredRow
from .identity import state_tensors, tensor_nbytes, user_path

#: Modules whose counts are remembered (a leak of a million modules stops adding new ones).
MAX_PATHS = 100_000
#: Rows written per record, the biggest changes first.
MAX_ROWS = 8
#: A module's own parameters and gradients grow when they hold this many times their first bytes,
#: and this many bytes more (an optimizer's first step gives every parameter its gradient).
OWN_GROWTH = 1.5
OWN_MIN_BYTES = 64 * 1024


#: A module's registries, in the order `_entries` counts them and rows name them.
KINDS = ("submodules", "parameters", "buffers", "hooks")
#: The module's hook dicts (`register_forward_hook`, ...), and its parameters' (`p.register_hook`).
MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
PARAM_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")
#: Hooks whose own objects are sized per row (the newest; the rest counted alike).
SIZED_HOOKS = 64


def _hook_dicts(m) -> list[tuple[str, dict]]:
    """(name, dict) of the hooks registered on `m` and on its own parameters."""
    out = [(h, d) for h in MODULE_HOOKS if (d := getattr(m, h, None))]
    for name, p in m._parameters.items():
        out += [(f"{name}.{h}", d) for h in PARAM_HOOKS if p is not None and (d := getattr(p, h, None))]
    return out


def _user_hooks(hooks: dict) -> list:
    """The hooks in `hooks` that are not memleak's own (the tracker's gradient hook on a parameter
    comes and goes with it)."""
    return [fn for fn in hooks.values() if not str(getattr(fn, "__module__", None) or "").startswith("memleak.")]


def _entries(m) -> tuple[int, int, int, int]:
    hooks = sum(len(_user_hooks(d)) for _, d in _hook_dicts(m))
    return len(m._modules), len(m._parameters), len(m._buffers), hooks


def _nbytes(t) -> int:
    try:
        return t.numel() * t.element_size()
    except Exception:  # a tensor subclass that cannot say
        return 0


def _storage_bytes(t, seen: set[int]) -> int:
    """The bytes of `t`'s storage, once per storage in `seen`: a gradient that autograd stole from
    the backward pass may be a view whose whole base it keeps (the rows `torch.stack` of a growing
    list of parameters gives each of them); a sparse one's, its indices and values (`tensor_nbytes`)."""
    key, nb = tensor_nbytes(t)
    if key in seen:
        return 0
    seen.add(key)
    # a dense tensor with no storage of its own (a subclass, a fake tensor): its elements
    return nb if nb or t.layout is not torch.strided else _nbytes(t)


class Registry:
    """The number of registered entries of each module path, as first seen."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[int, ...]] = {}
        self.own: dict[str, int] = {}  # each module's own parameters' bytes when first seen, with their gradients'

    def rows(self, model, optimizer=None) -> tuple[RegisteredRow, ...]:
        """A row for each module whose entries differ in number from when it was first seen."""
        changed, grown = [], []
        for name, m in model.named_modules():
            path = user_path(name) or "<root>"
            n = _entries(m)
            first = self.first.get(path)
            size, grads = _own_bytes(m)
            if first is None:
                if len(self.first) < MAX_PATHS:
                    # as with a dense gradient for each parameter (the first backward gives each one)
                    self.first[path], self.own[path] = n, max(size + grads, 2 * size)
                continue
            if n != first:
                changed.append((path, m, first, n))
            elif size + grads > OWN_GROWTH * self.own[path] + OWN_MIN_BYTES:
                grown.append((path, m, first, size, grads))
        changed.sort(key=lambda c: (-abs(sum(c[3]) - sum(c[2])), c[0]))
        state = getattr(optimizer, "state", None) or {}
        rows = [_row(path, m, first, n, state) for path, m, first, n in changed[:MAX_ROWS]]
        return (*rows, *(_own_row(*g) for g in grown[: MAX_ROWS - len(rows)]))

    def clear(self) -> None:
        self.first.clear()
        self.own.clear()


def _row(path: str, m, first: tuple[int, ...], n: tuple[int, ...], state) -> RegisteredRow:
    grew = max(range(len(KINDS)), key=lambda i: n[i] - first[i])  # the registry that changed most
    if KINDS[grew] == "hooks" and n[grew] > first[grew]:
        return _hooks_row(path, m, first, n)
    grew = max(range(3), key=lambda i: n[i] - first[i])  # of the three that hold tensors (a rise first)
    size = grads = kept = 0
    grad_storages: set[int] = set()
    for p in m.parameters():
        size += _nbytes(p)
        if p.grad is not None:
            grads += _storage_bytes(p.grad, grad_storages)
        kept += sum(_nbytes(v) for v in state_tensors(state, p))
    for b in m.buffers():
        size += _nbytes(b)
    reg = (m._modules, m._parameters, m._buffers)[grew]
    newest = next(reversed(reg), "")  # dicts keep insertion order: the last one registered
    if newest:
        newest = newest if path == "<root>" else f"{path}.{newest}"
    return RegisteredRow(path, sum(first), sum(n), size, grads, kept, newest, KINDS[grew])


def _own_bytes(m) -> tuple[int, int]:
    """The bytes of a module's own parameters, and of their gradients."""
    params = [p for p in m._parameters.values() if p is not None]
    return sum(_nbytes(p) for p in params), sum(_grad_bytes(p) for p in params)


def _grad_bytes(p) -> int:
    return _storage_bytes(p.grad, set()) if p.grad is not None else 0


def _own_row(path: str, m, first: tuple[int, ...], size: int, grads: int) -> RegisteredRow:
    """The row of a module whose own parameters or gradients grew (`size` and `grads` bytes, `_own_bytes`):
    `newest` the parameter that holds most."""
    params = {k: p for k, p in m._parameters.items() if p is not None}
    biggest = max(params, key=lambda k: _nbytes(params[k]) + _grad_bytes(params[k]), default="")
    return RegisteredRow(path, sum(first), sum(first), size, grads, 0, biggest, "tensors")


def _hooks_row(path: str, m, first: tuple[int, ...], n: tuple[int, ...]) -> RegisteredRow:
    """The row of a module that gained hooks: `bytes` the hooks' own objects (each function, its
    closure cells and defaults), `newest` the hook dict that holds most and its newest hook's code."""
    name, hooks = max(((name, _user_hooks(d)) for name, d in _hook_dicts(m)), key=lambda h: len(h[1]), default=("", []))
    fns = hooks[-SIZED_HOOKS:]
    size = sum(_fn_bytes(f) for f in fns) * len(hooks) // max(1, len(fns))
    code = getattr(getattr(fns[-1], "__func__", fns[-1]), "__code__", None) if fns else None
    where = f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code is not None else ""
    return RegisteredRow(path, sum(first), sum(n), size, 0, 0, f"{name}{where}", "hooks")


def _fn_bytes(fn) -> int:
    """A hook's own objects: the function, its closure cells and its defaults (what it refers to is
    counted where it is held)."""
    size = sys.getsizeof(fn)
    for part in (getattr(fn, "__closure__", None), getattr(fn, "__defaults__", None)):
        if part:
            size += sys.getsizeof(part) + sum(sys.getsizeof(c) for c in part if type(c).__name__ == "cell")
    return size
