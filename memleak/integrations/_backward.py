"""``torch.autograd.backward`` wrapped while `memleak run` runs a script (`zero_code`), until a model
or an optimizer step starts tracking: a script with no module and no optimizer (weights as plain
tensors, updated by hand) shows its iterations only by its backward passes, and keeps it.
``Tensor.backward`` calls it; the wrapper passes everything through, tells the session before and
after each outermost pass (one started inside a running backward, a reentrant checkpoint's, in
whatever thread the engine runs it, is no iteration), and is put back by `unwrap` unless
something replaced it since.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch.autograd


def wrap_backward(before: Callable[[], None], after: Callable[[], None]) -> Callable[[], None]:
    """Wrap it, calling the bound methods `before` and `after` (held weakly) around each outermost
    backward pass; returns what puts the original back."""
    original = torch.autograd.backward
    before_ref, after_ref = weakref.WeakMethod(before), weakref.WeakMethod(after)  # type: ignore[arg-type]

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        on_before, on_after = before_ref(), after_ref()
        if on_before is None or on_after is None or torch._C._current_graph_task_id() != -1:
            return original(*args, **kwargs)
        on_before()
        try:
            return original(*args, **kwargs)
        finally:
            on_after()

    torch.autograd.backward = backward  # type: ignore[assignment]

    def unwrap() -> None:
        if torch.autograd.backward is backward:
            torch.autograd.backward = original  # type: ignore[assignment]

    return unwrap
