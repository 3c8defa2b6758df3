"""memleak's hooks kept out of torch.compile: run with dynamo off, never compiled as frames.

A gradient hook or an optimizer step hook runs in eager code, but when a compiled function calls
``backward()`` or ``optimizer.step()`` dynamo breaks its graph there and compiles the Python
frames that call makes: a hook would be compiled as frames of its own (and break graphs on what it
does: frames, weak references, the autograd engine). Disabled, it runs as it does in eager code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def outside_dynamo(fn: F) -> F:
    """`fn`, run with dynamo off once torch.compile is in use (and `fn` itself otherwise: importing
    dynamo costs seconds, and without it nothing is compiled)."""
    dynamo = sys.modules.get("torch._dynamo")
    return fn if dynamo is None else dynamo.disable(fn)
