"""The Tracker's options checked before anything is installed: one clear UsageError each."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UsageError
from ..schema import LEVELS


def checked_options(
    model: Any, optimizer: Any, level: str, budgets: dict[str, float], record_history: bool | int, out: Any
) -> list:
    """The optimizers as a list, once every option is one the Tracker can run with (else
    UsageError, before anything is installed)."""
    if level not in LEVELS:
        raise UsageError(f"level must be one of {', '.join(map(repr, LEVELS))}, not {level!r}")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise UsageError(f"model must be a torch.nn.Module (or None), not {type(model).__name__}")
    optimizers = list(optimizer) if isinstance(optimizer, (list, tuple)) else ([optimizer] if optimizer else [])
    for opt in optimizers:
        if not isinstance(opt, torch.optim.Optimizer):
            raise UsageError(f"optimizer must be a torch.optim.Optimizer, not {type(opt).__name__}")
    optimizers = [wrapped_optimizer(opt) for opt in optimizers]
    for name, share in budgets.items():
        if not 0 < share <= 1:
            raise UsageError(f"{name} is a share of step time in (0, 1], not {share!r}")
    if record_history and out is None:
        raise UsageError("record_history needs out=: the snapshot is written next to the run file")
    return optimizers


def has_step_hooks(opt: Any) -> bool:
    """Whether `opt` ran ``Optimizer.__init__``: it has the step hook dicts its step runs."""
    return isinstance(getattr(opt, "_optimizer_step_pre_hooks", None), dict) and isinstance(
        getattr(opt, "_optimizer_step_post_hooks", None), dict
    )


def wrapped_optimizer(opt: Any) -> Any:
    """The optimizer whose step hooks run, and whose state holds the tensors: `opt` itself, or for
    a wrapper that subclasses ``torch.optim.Optimizer`` without running its ``__init__`` (timm's
    ``Lookahead``: no step hooks of its own, its step calls the base optimizer's) the optimizer it
    wraps, an attribute that shares its ``param_groups`` (else its only optimizer attribute)."""
    seen = set()
    while not has_step_hooks(opt) and id(opt) not in seen:
        seen.add(id(opt))
        inner = [v for v in vars(opt).values() if isinstance(v, torch.optim.Optimizer) and v is not opt]
        groups = getattr(opt, "param_groups", None)
        sharing = [v for v in inner if groups is not None and getattr(v, "param_groups", None) is groups]
        pick = sharing or inner
        if len(pick) != 1:
            break
        opt = pick[0]
    return opt
