"""The user's warnings as they were: memleak's bookkeeping inside a run must not show a warning
again that Python had shown once.

Python remembers which warnings it has shown in each module's ``__warningregistry__``, and
forgets all of it whenever the filters change: ``warnings.catch_warnings`` counts as a change
even though it puts the filters back. pandas enters one in most of its calls (``astype``,
``pandas_dtype``), and memleak's live check and detectors run pandas mid-run: without this guard
a warning the user's loop issues at one line each step, shown once untracked, was shown again
after each check (three or four times in 120 steps). Inside `kept`, a change that is undone
before it ends is not counted, and neither are filters added that cannot change what Python
decided before (an "ignore", or one for a warning class the body imported: scipy's, at memleak's
first look at a rise); any other change that stays is.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_depth = 0
_mutated: Any = None  # Python's own `warnings._filters_mutated`, while replaced


def _not_counted() -> None:
    """In place of `warnings._filters_mutated` inside `kept`."""


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Run the body without forgetting which warnings were shown, unless it leaves the filters changed."""
    global _depth, _mutated
    original = getattr(warnings, "_filters_mutated", None)
    if original is None:  # a Python that keeps its filters otherwise (3.14's context-aware warnings)
        yield
        return
    with _lock:
        if _depth == 0:
            _mutated = original
            warnings._filters_mutated = _not_counted  # type: ignore[attr-defined]
        _depth += 1
        filters = list(warnings.filters)
        modules = len(sys.modules)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            real = _mutated
            if _depth == 0 and warnings._filters_mutated is _not_counted:  # type: ignore[attr-defined]
                warnings._filters_mutated = real  # type: ignore[attr-defined]
            if not _same_decisions(filters, list(warnings.filters), modules):
                real()


def _same_decisions(before: list, after: list, modules: int) -> bool:
    """Whether the filters `after` decide as `before` did for every warning already seen: the same
    filters, in order, with at most some added that only ignore, or that name a warning class
    defined in a module imported since there were `modules` modules (nothing before was one)."""
    if after == before:
        return True
    added = [f for f in after if f not in before]
    if [f for f in after if f not in added] != before:
        return False  # one was removed or moved
    new = set(list(sys.modules)[modules:])
    return all(f[0] == "ignore" or getattr(f[2], "__module__", None) in new for f in added)
