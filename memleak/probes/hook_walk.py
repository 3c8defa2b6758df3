"""What a hook keeps: the part of the reference walk (`walk.Walk`) that opens the hooks on a
module, a parameter or an optimizer."""

from __future__ import annotations

import itertools
import types
from typing import Any

from . import reach
from .reach import closure_items, default_items, fn_name
from .walk_scope import SCALARS


class HookWalk:
    """`Walk`'s hooks: what each one keeps is pushed onto the walk, named by its variables."""

    piled_hooks: dict[str, str]  # holder -> why: captured by copies of one module hook

    def push(self, obj: Any, path: str, holder: str | None, kind: str, weight: float = 1.0, note: str = "") -> None:
        raise NotImplementedError  # the walk's own

    def hook(self, fn, where: str, weight: float, copies: int = 1, hk: str = "") -> None:
        """A hook on a module: its closure's variables and default arguments (a partial's bound ones too), and the
        object a bound-method hook or hook object belongs to. `copies`: hooks with its code on it (never removed)."""
        fn, bound = reach.bound_items(fn)
        note = f"captured by hook {fn_name(fn)} on {where}"
        if copies > 1:
            note += f", one of {copies} hooks with this code on it (registered again and again, never removed)"
        for cname, value in itertools.chain(bound, closure_items(fn), default_items(fn)):
            if copies > 1 and not isinstance(value, SCALARS):
                self.piled_hooks[cname] = note
            self.push(value, cname, cname, "closure", weight, note)
        if isinstance(fn, types.MethodType):
            owner = type(fn.__self__).__name__
            self.push(fn.__self__, owner, owner, "hook", weight, f"hook {fn_name(fn)} on {where}")
        elif not isinstance(fn, types.FunctionType) and hasattr(fn, "__dict__"):
            # a hook object (torch.nn.utils.prune's, a parametrization's): named where it is registered
            held = f"{where}.{hk}" if hk else type(fn).__name__
            self.push(fn, held + "[...]", held, "hook", weight, f"hook {type(fn).__name__} on {where}")
