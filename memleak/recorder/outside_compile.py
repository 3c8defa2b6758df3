"""memleak's hooks kept out of torch.compile: run with dynamo off, never compiled as frames, and
invisible to dynamo where it traces a compiled ``optimizer.step()``.

A gradient hook or an optimizer step hook runs in eager code, but when a compiled function calls
``backward()`` or ``optimizer.step()`` dynamo breaks its graph there and compiles the Python
frames that call makes: a hook would be compiled as frames of its own (and break graphs on what it
does: frames, weak references, the autograd engine). Disabled, it runs as it does in eager code.

An optimizer step hook needs more: where the whole training step is compiled, dynamo traces
``optimizer.step()`` and inlines its hooks. A disabled hook is a graph break of its own there (it
moved the break torch's optimizer makes: 3 breaks instead of 4), and a hook that asks
``torch.compiler.is_compiling()`` makes dynamo keep a frame it would skip (one frame fewer). So a
step hook calls its work through `_step_work`, a function dynamo ignores while tracing (its
``ignore_logging_functions``: a no-op there, no guard on what it does); the hook's own frame and
`_step_work`'s are marked for dynamo to skip, so where the step's frames run eagerly (the post
hooks of a compiled step run after its last graph) the hook runs as it would without compile.
What dynamo compiles is then the same with memleak as without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., object])


def outside_dynamo(fn: F) -> F:
    """`fn`, run with dynamo off once torch.compile is in use (and `fn` itself otherwise: importing
    dynamo costs seconds, and without it nothing is compiled)."""
    dynamo = sys.modules.get("torch._dynamo")
    return fn if dynamo is None else dynamo.disable(fn)


def _step_work(work: Callable[[Any], None], optimizer: Any) -> None:
    work(optimizer)


class StepHooks:
    """Optimizer step hooks (pre and post) that dynamo does not see; `remove()` takes them off and,
    with the last, `_step_work` off dynamo's ignore list."""

    _users = 0  # live StepHooks holding `_step_work` on the ignore list

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._ignored = False

    def add(self, register: Callable[[Any], Any], work: Callable[[Any], None]) -> None:
        """``register(hook)`` (``opt.register_step_post_hook``, or the global one) a hook that calls
        ``work(optimizer)``."""
        self._ignore()
        outside = outside_dynamo(work)

        def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            _step_work(outside, optimizer)

        self._skip(hook)
        self._handles.append(register(hook))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._ignored:
            self._ignored = False
            StepHooks._users -= 1
            dynamo = sys.modules.get("torch._dynamo")
            if StepHooks._users == 0 and dynamo is not None:
                dynamo.config.ignore_logging_functions.discard(_step_work)

    def _ignore(self) -> None:
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or self._ignored:
            return
        self._ignored = True
        StepHooks._users += 1
        dynamo.config.ignore_logging_functions.add(_step_work)

    @staticmethod
    def _skip(hook: Callable[..., None]) -> None:
        """Dynamo runs these frames as they are, without looking at them (nor counting them)."""
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:
            from torch._dynamo.eval_frame import skip_code

            for fn in (hook, _step_work):
                skip_code(fn.__code__)
