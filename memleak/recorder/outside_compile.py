"""memleak's hooks kept out of torch.compile: run with dynamo off, never compiled as frames, and
empty where dynamo traces them into a compiled function.

A gradient hook or an optimizer step hook runs in eager code, but when a compiled function calls
``backward()`` or ``optimizer.step()`` dynamo breaks its graph there and compiles the Python
frames that call makes: a hook would be compiled as frames of its own (and break graphs on what it
does: frames, weak references, the autograd engine). Disabled, it runs as it does in eager code.

An optimizer step hook needs more: where the whole training step is compiled, dynamo traces
``optimizer.step()`` and inlines its hooks. A disabled hook is a graph break of its own there (it
moved the breaks torch's optimizer makes: 3 instead of 4). So a step hook first asks
``torch.compiler.is_compiling()``, which dynamo folds to True: traced, the hook is empty and
the compiled step is what it is without memleak (no break, no guard, no global dynamo setting).
It then never runs for a step compiled that way; `boundaries.py` sees such a step from the
parameters it changed (`Boundaries._stepped_unseen`).

Dynamo also guards on the keys of the optimizer's hook dicts (the handles' ids): a hook registered
under a new id would recompile torch's step wrapper each time tracking starts on a step compiled
before (its cache fills after 8 trackers). `add_step_hook` keys memleak's hooks the same way for
every tracker: what dynamo compiled for one tracker serves the next. Where the step was compiled
before tracking starts, any hook would still fail the guard of that version (one more compile of
the wrapper when the hooks come, one more when they go): `step_compiled_before` tells, and then no
step hook is added at all.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.optim.optimizer as optimizer_hooks

F = TypeVar("F", bound=Callable[..., object])


def outside_dynamo(fn: F) -> F:
    """`fn`, run with dynamo off once torch.compile is in use (and `fn` itself otherwise: importing
    dynamo costs seconds, and without it nothing is compiled)."""
    dynamo = sys.modules.get("torch._dynamo")
    return fn if dynamo is None else dynamo.disable(fn)


StepWork = Callable[[Any, tuple, dict], None]


def step_hook(work: StepWork) -> Callable[[Any, Any, Any], None]:
    """An optimizer step hook (pre or post) that calls ``work(optimizer, args, kwargs)`` in eager
    code and is empty where dynamo traces it (a compiled ``optimizer.step()``)."""
    outside = outside_dynamo(work)

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if torch.compiler.is_compiling():  # folded by dynamo: nothing of memleak's in the graph
            return
        outside(optimizer, args, kwargs)

    dynamo = sys.modules.get("torch._dynamo")
    skip = getattr(getattr(dynamo, "eval_frame", None), "skip_code", None)
    if skip is not None:  # called from a frame dynamo left eager: not compiled as a frame of its own
        skip(hook.__code__)  # (traced into a compiled step, it is still inlined and folded)
    return hook


def _is_memleaks(key: Any) -> bool:
    return isinstance(key, tuple) and key[:1] == ("memleak",)


def only_memleaks_step_hooks(opt: Any) -> bool:
    """Whether every step hook that `opt.step()` runs (its own and the global ones) is memleak's."""
    return all(
        _is_memleaks(k)
        for hooks in (
            getattr(opt, "_optimizer_step_pre_hooks", None),
            getattr(opt, "_optimizer_step_post_hooks", None),
            getattr(optimizer_hooks, "_global_optimizer_pre_hooks", None),
            getattr(optimizer_hooks, "_global_optimizer_post_hooks", None),
        )
        for k in (hooks if hooks is not None else ("unknown",))  # torch's private dicts: unknown is not memleak's
    )


def add_step_hook(register: Callable[[Any], Any], hooks: dict[Any, Any], work: StepWork) -> Any:
    """``register(step_hook(work))`` (an optimizer's ``register_step_post_hook``, or the global
    one, whose dict is `hooks`), keyed ``("memleak", n)`` with the first n free, not by the
    handle's new id; returns the handle, which removes it as usual."""
    handle = register(step_hook(work))
    if handle.id in hooks:  # as torch registers them (else left as registered)
        key = next(k for k in (("memleak", n) for n in itertools.count()) if k not in hooks)
        hooks[key] = hooks.pop(handle.id)  # the same place: at the end, after the user's hooks
        handle.id = key
    return handle


def step_compiled_before(optimizer: Any) -> bool:
    """Whether dynamo holds a compiled version of torch's step wrapper (``type(optimizer).step``,
    one code object for every optimizer class) whose guards this optimizer passes as it is, without
    memleak's hooks: its step was compiled before tracking started, and a hook would recompile it."""
    dynamo = sys.modules.get("torch._dynamo")
    step = getattr(type(optimizer), "step", None)
    code = getattr(step, "__code__", None)
    first = next((p for g in getattr(optimizer, "param_groups", ()) for p in g["params"]), None)
    # the guards match the optimizer by id, which a new one may reuse; a step dynamo traced has
    # marked its parameters static as well
    if dynamo is None or code is None or getattr(first, "_dynamo_static_input_type", None) is None:
        return False
    try:  # dynamo's private API: anything unexpected means "not known", and hooks as usual
        entries = dynamo.eval_frame._debug_get_cache_entry_list(code)
        # the wrapper's frame as a call would make it: its arguments and the step it wraps (a cell)
        cells = getattr(step, "__closure__", None) or ()
        frame = {"args": (optimizer,), "kwargs": {}}
        frame.update(zip(code.co_freevars, (c.cell_contents for c in cells), strict=False))
        return any(e.guard_manager.check(frame) for e in entries)
    except Exception:
        return False
