"""Which tensors a run owns legitimately, and what they weigh: parameters, gradients, buffers and
optimizer state by identity; the model's module paths; tensor ages by weak reference.

Split from `holders` (the reference walk); the walk and the tensor and module probes use them.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch


def tensor_nbytes(t: torch.Tensor) -> tuple[int, int]:
    """(storage key, bytes) of a tensor; a sparse tensor's, which has no storage of its own, are its
    indices' and values'; bytes 0 for other tensors without a storage."""
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        inner = _unwrapped(t)  # a torch.func transform's wrapper (kept by a vjp_fn): the tensor it wraps
        return tensor_nbytes(inner) if inner is not None else (id(t), _sparse_nbytes(t))


def _unwrapped(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor a torch.func (functorch) wrapper wraps, else None."""
    functorch = getattr(torch._C, "_functorch", None)
    try:
        if functorch is not None and functorch.is_functorch_wrapped_tensor(t):
            return functorch.get_unwrapped(t)
    except (RuntimeError, TypeError, AttributeError):
        pass
    return None


def _sparse_nbytes(t: torch.Tensor) -> int:
    """The bytes of a sparse tensor's parts (COO: indices and values; compressed: the two index
    tensors and the values), else 0."""
    parts: tuple[torch.Tensor, ...]
    try:
        if t.layout is torch.sparse_coo:
            parts = (t._indices(), t._values())
        elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
            parts = (t.crow_indices(), t.col_indices(), t.values())
        elif t.layout in (torch.sparse_csc, torch.sparse_bsc):
            parts = (t.ccol_indices(), t.row_indices(), t.values())
        else:
            return 0
        return sum(p.untyped_storage().nbytes() for p in parts)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return 0


class Ages:
    """When each tensor was first seen, by weak reference (ids are reused)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int]] = {}

    def first_seen(self, t: torch.Tensor, step: int) -> int:
        entry = self._seen.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        try:
            self._seen[id(t)] = (weakref.ref(t), step)
        except TypeError:
            pass
        return step

    def prune(self) -> None:
        dead = [k for k, (r, _) in self._seen.items() if r() is None]
        for k in dead:
            del self._seen[k]

    def clear(self) -> None:
        self._seen.clear()


def is_compiled(model) -> bool:
    """True when the model (or a submodule) runs under torch.compile: Python hooks and modes in its
    forward would break its graphs or force recompiles, so probes keep out of it."""
    if model is None:
        return False
    if type(model).__name__ == "OptimizedModule" or hasattr(model, "_orig_mod"):
        return True
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of a tensor this process holds: a DTensor's local shard (FSDP2 parameters, their
    gradients and optimizer state are DTensors whose sizes are global), else the tensor itself."""
    if type(t) in _PLAIN:  # most, and a missing attribute's lookup raises inside: ten times the cost
        return t
    local = getattr(t, "_local_tensor", None)
    return local if isinstance(local, torch.Tensor) else t


def local_nbytes(t: torch.Tensor) -> int:
    """Bytes of the elements this process holds of `t` (its local shard for a DTensor)."""
    t = local_tensor(t)
    return t.numel() * t.element_size()


def original_module(model):
    """The module the user wrote: ``torch.compile(m)`` wraps ``m`` in an OptimizedModule that
    keeps it as ``_orig_mod``; anything else is returned as it is."""
    while model is not None and type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
        model = model._orig_mod
    return model


def user_path(name: str) -> str:
    """A module path as the user's code spells it: without the ``_orig_mod`` step that
    ``torch.compile`` adds for each compiled module (``enc._orig_mod.fc`` -> ``enc.fc``)."""
    if "_orig_mod" not in name:
        return name
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


#: The model's modules with their paths, each once, as ``named_modules()`` gives them.
Modules = list[tuple[str, torch.nn.Module]]


def model_modules(model) -> Modules:
    """The model's modules with their paths, from one pass over the tree: a deep step's parts (the
    owned tensors, the walk's module paths, the classes whose code and globals it reads) share it."""
    return [] if model is None else list(model.named_modules(remove_duplicate=True))


def module_names(model, modules: Modules | None = None) -> dict[int, str]:
    """Module path by module id, in the user's spelling (a compiled wrapper shares its module's path)."""
    mods = model_modules(model) if modules is None else modules
    return {id(m): user_path(name) for name, m in mods}


def params_and_buffers(model, modules: Modules | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The model's parameters and buffers, each once, as ``model.parameters()`` and
    ``model.buffers()`` give them, from one pass over its modules (each of those builds every
    module's path: four times the time, on every deep step)."""
    params: dict[int, torch.Tensor] = {}
    buffers: dict[int, torch.Tensor] = {}
    if model is not None:
        for _, m in model_modules(model) if modules is None else modules:
            for p in m._parameters.values():
                if p is not None:
                    params[id(p)] = p
            for b in m._buffers.values():
                if b is not None:
                    buffers[id(b)] = b
    return list(params.values()), list(buffers.values())


def state_tensors(state: Any, p: Any) -> list[torch.Tensor]:
    """The tensors an optimizer's `state` (``optimizer.state``) keeps for parameter `p` (Adam's
    moments, its step count); none for a parameter it keeps nothing for."""
    st = state.get(p) if state else None
    return [v for v in st.values() if isinstance(v, torch.Tensor)] if isinstance(st, dict) else []


def excluded_ids(model, optimizer, start_params=None, modules: Modules | None = None) -> tuple[set[int], set[int]]:
    """Ids of parameters, gradients, buffers and optimizer state; and their storage pointers.

    With a model, only its parameters (and their gradients and optimizer state) are owned: a
    parameter the optimizer keeps that no module of the model has (a group added on every step)
    is counted where the walk finds it (`optimizer_params`). Without one, the optimizer's are,
    or, given `start_params` (`optimizer_params.StartParams`), those it held when first seen.
    `modules`: the model's (`model_modules`), when the caller has them already."""
    params, buffers = params_and_buffers(model, modules)
    # a buffer that carries a graph (a running statistic updated with grad) is no state of the run's
    owned = [b for b in buffers if b.grad_fn is None]
    if optimizer is not None:
        if model is None:
            params = (
                start_params.owned(optimizer)
                if start_params is not None
                else [p for group in optimizer.param_groups for p in group["params"]]
            )
        for p in params:
            # state that carries a graph (a step run with grad enabled after a create_graph backward) is
            # no state of the run's: the walk follows it, as a buffer updated with grad (optimizer_params)
            owned.extend(t for t in state_tensors(optimizer.state, p) if t.grad_fn is None)
    # .grad of parameters only: read on a tensor made by an op (a buffer can be one), torch warns
    owned.extend([g for g in (getattr(p, "grad", None) for p in params) if g is not None])
    owned.extend(params)
    ids: set[int] = set()
    ptrs: set[int] = set()
    for t in owned:
        if not isinstance(t, torch.Tensor) or id(t) in ids:
            continue
        ids.add(id(t))
        t = local_tensor(t)  # a sharded (FSDP2) tensor: its shard is what this rank holds
        ids.add(id(t))
        try:
            # parameters, gradients and optimizer state are whole storages: data_ptr is the
            # storage's pointer, and much cheaper than building the storage object
            ptrs.add(t.data_ptr())
        except (RuntimeError, NotImplementedError, TypeError):
            pass
    ptrs.discard(0)
    return ids, ptrs
