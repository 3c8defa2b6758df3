"""What an optimizer keeps that the walk counts: its own extra attributes, and the parameters
in its ``param_groups`` that are not the tracked model's (with their gradients and the state it
keeps for them).

The model's parameters and their state are owned (`identity.excluded_ids`); a parameter the
optimizer holds that no module of the model has is counted under ``<optimizer>.param_groups``.
A constant set of them (a learnable loss weight) stays flat; a group added on every step
(``add_param_group`` with a layer built inside the loop) grows, and is named there.

Tracked without a model (``memleak.track(optimizer=opt)``), the parameters the optimizer held
when memleak first saw it stand for the model's (`StartParams`): those added later are counted
the same way.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import torch

from . import reach
from .identity import state_tensors
from .walk_scope import CONTAINERS

#: Tensors of the optimizer's groups listed at most per walk (the rest is not walked).
_MAX_LISTED = 4096


class StartParams:
    """The parameters each optimizer held when memleak first saw it (weak references, by id):
    without a model they are the model's, and what the optimizer gains later is counted."""

    def __init__(self, opt: Any = None) -> None:
        """Remembering what `opt` (None: no optimizer yet) holds now."""
        self._by_opt: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        if opt is not None:
            self.owned(opt)

    def owned(self, opt: Any) -> list[torch.Tensor]:
        """`opt`'s parameters that it held when first seen here (all of them, the first time)."""
        params = [p for g in getattr(opt, "param_groups", None) or () for p in g.get("params", ())]
        params = [p for p in params if isinstance(p, torch.Tensor)]
        try:
            known = self._by_opt.get(opt)
            if known is None:
                known = self._by_opt[opt] = {id(p): weakref.ref(p) for p in params}
        except TypeError:  # an optimizer without weak references: all its parameters are owned
            return params
        return [p for p in params if (r := known.get(id(p))) is not None and r() is p]


def stale_params(opt: Any, exclude: set[int]) -> list[torch.Tensor]:
    """The parameters in `opt`'s param_groups that are not in `exclude` (not the model's), each
    followed by its gradient and the state tensors the optimizer keeps for it."""
    out: list[torch.Tensor] = []
    state = getattr(opt, "state", None) or {}
    for group in getattr(opt, "param_groups", None) or ():
        for p in group.get("params", ()):
            if not isinstance(p, torch.Tensor) or id(p) in exclude:
                continue
            out.append(p)
            if p.grad is not None:
                out.append(p.grad)
            out.extend(state_tensors(state, p))
            if len(out) >= _MAX_LISTED:
                return out
    return out


def optimizer_held(opt: Any, exclude: set[int]) -> Iterator[tuple[str, Any, str, str]]:
    """(attribute, value, holder kind, why) for what the walk counts under an optimizer: its extra
    attributes, and (as ``param_groups``) the parameters it keeps that are not the model's."""
    name = type(opt).__name__
    why = f"an attribute {name} keeps besides its state (the model's parameters and their state are not counted)"
    for k, v in reach.optimizer_items(opt):
        yield k, v, "optimizer_attr", why
    for k, v in group_extras(opt):
        yield k, v, "optimizer_attr", f"a key the code added to a param group of {name} (not one of its settings)"
    for k, v in state_extras(opt):
        yield k, v, "optimizer_attr", f"containers the code keeps in {name}'s state for each parameter under one key"
    stale = stale_params(opt, exclude)
    if stale:
        yield (
            "param_groups",
            stale,
            "optimizer_params",
            f"parameters {name} keeps in its param_groups that are not the model's (or, tracked without "
            "a model, that it gained after tracking started), with their gradients and its state for them",
        )
    graphed = graphed_state(opt)
    if graphed:
        yield (
            "state",
            graphed,
            "optimizer_graph",
            f"{name}'s state for the model's parameters, updated with grad enabled: each update adds to an "
            "autograd graph that reaches the step's gradients and every earlier update",
        )
    orphans = orphaned_state(opt)
    if orphans:
        yield (
            "state",
            orphans,
            "optimizer_orphans",
            f"parameters {name} keeps as keys of its state although no param group lists them any more "
            "(replaced or removed), with their gradients and its state for them",
        )
    extra = foreign_state(opt, exclude)
    if extra and not orphans and not graphed:  # one holder a name: a replaced layer's state, the likelier leak, first
        yield (
            "state",
            extra,
            "optimizer_state",
            f"state a second {name} keeps for the model's parameters (moments, buffers): an optimizer "
            "other than the tracked one, kept alive",
        )


def group_extras(opt: Any) -> Iterator[tuple[str, Any]]:
    """(name, value) of each container or tensor the code put in a param group under a key that is
    none of the optimizer's settings (``opt.param_groups[0]["trace"] = []``): the optimizer keeps
    it as long as itself."""
    settings = {"params", *(getattr(opt, "defaults", None) or {})}
    for i, group in enumerate(getattr(opt, "param_groups", None) or ()):
        for k, v in group.items() if isinstance(group, dict) else ():
            if k not in settings and isinstance(v, (torch.Tensor, list, dict, set, tuple)):
                yield f"param_groups[{i}][{k!r}]", v


#: The lists torch.optim.LBFGS keeps in its state (torch/optim/lbfgs.py): torch's own, not the code's.
TORCH_STATE_LISTS = frozenset({"old_dirs", "old_stps", "ro", "al"})


def state_extras(opt: Any) -> Iterator[tuple[str, list]]:
    """(name, the containers) of each key under which the code keeps a container in the
    optimizer's per-parameter state (``opt.state[p].setdefault("norms", []).append(...)``), one
    holder for all parameters: torch's optimizers keep tensors and numbers there, not lists
    (LBFGS aside: its curvature history, bounded by ``history_size``, is lists)."""
    state = getattr(opt, "state", None)
    if not isinstance(state, dict):
        return
    own = TORCH_STATE_LISTS if type(opt).__module__.startswith("torch.optim") else ()
    by_key: dict[str, list] = {}
    for group in getattr(opt, "param_groups", None) or ():
        for p in group.get("params", ()):
            per_param = state.get(p)  # .get: a defaultdict gains no entry
            for k, v in per_param.items() if isinstance(per_param, dict) else ():
                if isinstance(v, CONTAINERS) and k not in own:
                    by_key.setdefault(str(k), []).append(v)
    for k, values in by_key.items():
        yield f"state[...][{k!r}]", values


def foreign_state(opt: Any, exclude: set[int]) -> list[torch.Tensor]:
    """The state tensors `opt` keeps for the model's parameters that are not owned: `opt` is not
    the tracked optimizer (one built again and kept, a copy), and what it keeps is memory."""
    out: list[torch.Tensor] = []
    state = getattr(opt, "state", None) or {}
    for group in getattr(opt, "param_groups", None) or ():
        for p in group.get("params", ()):
            if isinstance(p, torch.Tensor) and id(p) in exclude:
                out.extend(t for t in state_tensors(state, p) if id(t) not in exclude)
                if len(out) >= _MAX_LISTED:
                    return out
    return out


def graphed_state(opt: Any) -> list[torch.Tensor]:
    """The state tensors `opt` keeps for its parameters that carry an autograd graph: its ``step``
    ran with grad enabled (no ``@torch.no_grad()``) on gradients that carry one
    (``backward(create_graph=True)``), so each in-place update chains onto the last."""
    state = getattr(opt, "state", None)
    if not isinstance(state, dict) or not state:
        return []
    out: list[torch.Tensor] = []
    for group in getattr(opt, "param_groups", None) or ():
        for p in group.get("params", ()):
            out.extend(t for t in state_tensors(state, p) if t.grad_fn is not None)
            if len(out) >= _MAX_LISTED:
                return out
    return out


def orphaned_state(opt: Any) -> list[torch.Tensor]:
    """The parameters that are keys of `opt`'s state but in none of its param groups (a layer
    replaced by assigning ``param_groups[i]["params"]``, a pruned parameter), each followed by its
    gradient and state: ``opt.state`` keeps them, and all they hold, for as long as it lives."""
    state = getattr(opt, "state", None)
    if not isinstance(state, dict) or not state:
        return []
    listed = {id(p) for g in getattr(opt, "param_groups", None) or () for p in g.get("params", ())}
    out: list[torch.Tensor] = []
    for p in list(state)[:_MAX_LISTED]:
        if isinstance(p, torch.Tensor) and id(p) not in listed:
            out.append(p)
            if p.grad is not None:
                out.append(p.grad)
            out.extend(state_tensors(state, p))
    return out
