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
    for name, share in budgets.items():
        if not 0 < share <= 1:
            raise UsageError(f"{name} is a share of step time in (0, 1], not {share!r}")
    if record_history and out is None:
        raise UsageError("record_history needs out=: the snapshot is written next to the run file")
    return optimizers
