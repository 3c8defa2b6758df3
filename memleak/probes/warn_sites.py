"""Warnings torch issues under memleak's function mode, shown at the user's line, not memleak's.

While a deep step's mode (`tagging._BirthMode`) dispatches torch functions, Python attributes a
warning torch issues to the mode's own frame: the user would read
``memleak/probes/tagging.py:76: UserWarning: Using a target size ...`` and, as that one location
is shown once, lose the same warning from their other lines. While a mode is on, `install` wraps
``warnings._showwarnmsg`` (what Python calls to show any warning); a warning from the mode's frame
is issued again at the frame it would have had without the mode, under that frame's filters and
registry. Every other warning passes through untouched. Counted: the last `uninstall` puts the
original back.

One difference is left: Python's filters see the mode's module first, so a warning ignored by
default there (a DeprecationWarning) is not shown at the user's ``__main__`` line as it would be.
"""

from __future__ import annotations

import sys
import threading
import types
import warnings
from typing import Any

import torch.overrides

_lock = threading.Lock()
_installed = 0
_original: Any = None
# The mode's __torch_function__ code (set by `watch_code`) and its module's globals.
_mode_code: types.CodeType | None = None
_mode_globals: dict[str, Any] = {}
_DISPATCH_CODE = torch.overrides.handle_torch_function.__code__


def watch_code(code: types.CodeType, module_globals: dict[str, Any]) -> None:
    """Name the frame whose warnings are moved: the mode's dispatch, in the module of those globals."""
    global _mode_code, _mode_globals
    _mode_code, _mode_globals = code, module_globals


def install() -> None:
    global _installed, _original
    with _lock:
        if _installed == 0:
            _original = warnings._showwarnmsg  # type: ignore[attr-defined]
            warnings._showwarnmsg = _show  # type: ignore[attr-defined]
        _installed += 1


def uninstall() -> None:
    global _installed
    with _lock:
        if _installed == 0:
            return
        _installed -= 1
        if _installed == 0 and warnings._showwarnmsg is _show:  # type: ignore[attr-defined]
            warnings._showwarnmsg = _original  # type: ignore[attr-defined]


def _show(msg: warnings.WarningMessage) -> None:
    original = _original or warnings._showwarnmsg_impl  # type: ignore[attr-defined]
    if _mode_code is None or msg.filename != _mode_code.co_filename:
        return original(msg)
    # the mode's module must not remember having shown it: the next one may come from another line
    _mode_globals.pop("__warningregistry__", None)
    frame = _users_frame(sys._getframe(1))
    if frame is None:
        return original(msg)
    g = frame.f_globals
    # a "once" filter has just noted it for the mode's frame: let the user's frame show it
    warnings.onceregistry.pop((str(msg.message), msg.category), None)  # type: ignore[attr-defined]
    warnings.warn_explicit(
        msg.message,
        msg.category,
        frame.f_code.co_filename,
        frame.f_lineno,
        g.get("__name__"),
        g.setdefault("__warningregistry__", {}),
        g,
    )


def _users_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """The frame a warning issued at the mode's frame would have had without the mode: the one that
    called torch (a torch function written in Python dispatches through `handle_torch_function`,
    so the frames of both go too)."""
    while frame is not None and frame.f_code is not _mode_code:
        frame = frame.f_back
    if frame is None:
        return None
    frame = frame.f_back
    if frame is not None and frame.f_code is _DISPATCH_CODE:
        frame = frame.f_back  # the torch function that dispatched
        frame = frame.f_back if frame is not None else None
    return frame
