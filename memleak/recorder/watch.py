"""`memleak.watch`: a decorator that records a run in which each call is one iteration."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..probes import is_oom
from ..schema import Boundary
from .running import close_at_exit
from .tracker import Tracker


def watch(model: Any = None, **options: Any) -> Callable:
    """Decorator: each call of the decorated function is one iteration.

    ``@memleak.watch(model)`` or bare ``@memleak.watch``. The tracker starts on
    the first call and stays open between calls (its hooks must see them); it is
    at ``fn.tracker``; ``fn.tracker.close()`` removes everything, as does exit. Once closed,
    memleak keeps no reference to it (nor to what the function holds).
    """
    if callable(model) and not isinstance(model, torch.nn.Module):
        return watch()(model)  # used bare: @memleak.watch

    def decorate(fn: Callable) -> Callable:
        tracker = Tracker(model, **options)
        tracker._boundaries.mode = Boundary.CALL  # each call is one iteration; optimizer steps mark none

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if tracker._state == "new":
                with tracker._lock:  # two threads making the first call start it once
                    if tracker._state == "new":
                        tracker.start()
                        close_at_exit(tracker)  # held until it closes, not longer
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:
                if is_oom(e) and tracker.active:
                    tracker._record_oom(e)
                raise
            with tracker._lock:  # calls returning in several threads: one step at a time
                tracker._mark(Boundary.CALL)
            return result

        wrapper.tracker = tracker  # type: ignore[attr-defined]
        return wrapper

    return decorate
