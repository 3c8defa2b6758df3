"""Allocation stacks: each distinct stack formatted once, and the top user frame (the "site")
that blocks and trace entries are grouped by."""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..units import fmt_value
from .layout import NotASnapshot

NO_STACK = "<no stack recorded>"

#: Characters of formatted stacks allowed per table row that a snapshot may hold (with a
#: file, rows are bounded by its size): real stacks are shared by many blocks, so they take far
#: less; a pickle that repeats one long file name in a deep stack would take far more.
STACK_CHARS_PER_ROW = 512

#: A frame as a hashable (filename, line, name): the key stacks are cached by.
_FRAME_KEY = operator.itemgetter("filename", "line", "name")


def _frame_str(frame: tuple, full: bool) -> str:
    filename, line, name = frame
    return f"{filename if full else filename.rsplit('/', 1)[-1]}:{line}:{name}"


#: memleak's own frames: this package, or an installed memleak on the machine that took the
#: snapshot (a user's project in a folder named memleak is still the user's).
_MEMLEAK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_memleak_frame(filename: str) -> bool:
    return filename.startswith(_MEMLEAK_DIR) or "-packages/memleak/" in filename


def _is_user_frame(filename: str) -> bool:
    """A Python frame outside torch, the standard library and memleak: where a person
    would look. Third-party model code (transformers, timm...) counts as user code."""
    if not filename.endswith(".py") or "<frozen" in filename:
        return False
    if "/torch/" in filename or _is_memleak_frame(filename):
        return False
    return not ("/lib/python3" in filename and "-packages/" not in filename)


class Stacks:
    """Formats each distinct allocation stack once. torch symbolises every distinct
    traceback once and shares its frame list between entries (the pickle keeps that
    sharing), so most lookups hit the cache by list identity; lists that are equal but
    not shared hit the cache by content. Lists stay alive in the snapshot data while
    this runs, so their ids are stable."""

    def __init__(self, max_chars: int | None = None) -> None:
        self.max_chars = max_chars  # of formatted stacks in all; None: unbounded
        self.chars = 0
        self.tops: dict[str, int] = {}
        self.fulls: dict[str, int] = {}
        self._by_list: dict[int, tuple[int, int]] = {}
        self._by_content: dict[tuple, tuple[int, int]] = {}

    def codes(self, frames: Any) -> tuple[int, int]:
        """(top-frame code, full-stack code); (-1, -1) when no stack was recorded."""
        if not frames:
            return -1, -1
        c = self._by_list.get(id(frames))
        if c is None:
            key = tuple(map(_FRAME_KEY, frames))
            c = self._by_content.get(key)
            if c is None:
                c = self._by_content[key] = self._format(key)
            self._by_list[id(frames)] = c
        return c

    def _format(self, frames: tuple[tuple, ...]) -> tuple[int, int]:
        self._count(frames)
        top = next((f for f in frames if _is_user_frame(f[0])), None)
        if top is None:  # no user frame: the innermost Python frame, else what the C++ frames did
            top = next((f for f in frames if f[0].endswith(".py")), None)
        site = _frame_str(top, full=False) if top is not None else native_site(frames)
        full = "\n".join(_frame_str(f, full=True) for f in frames)
        return (
            self.tops.setdefault(site, len(self.tops)),
            self.fulls.setdefault(full, len(self.fulls)),
        )

    def _count(self, frames: tuple[tuple, ...]) -> None:
        """Check each frame's fields and count the characters the stack will take, before it is
        formatted; NotASnapshot when a field has the wrong type or the total passes max_chars."""
        for filename, line, name in frames:
            if type(filename) is not str or type(name) is not str or type(line) is not int or abs(line) >= 1 << 63:
                raise NotASnapshot(
                    f"a stack frame {{filename: {fmt_value(filename)}, line: {fmt_value(line)}, "
                    f"name: {fmt_value(name)}}} is not a file name, a line number and a function name"
                )
            self.chars += len(filename) + len(name) + 24
        if self.max_chars is not None and self.chars > self.max_chars:
            raise NotASnapshot(
                f"its allocation stacks would take more than {self.max_chars:,} characters to print, "
                "far more than a snapshot of its size holds (the file is corrupt, or built to exhaust memory)"
            )

    def columns(self, codes: Iterable[tuple[int, int]]) -> tuple[pd.Categorical, pd.Categorical]:
        pairs = np.array(list(codes), dtype=np.int64).reshape(-1, 2)
        return (
            pd.Categorical.from_codes(pairs[:, 0], categories=list(self.tops)),
            pd.Categorical.from_codes(pairs[:, 1], categories=list(self.fulls)),
        )


_AUTOGRAD_NODE = re.compile(r"torch::autograd::(?:generated::)?(\w+)::apply")
_OP = re.compile(r"at::_ops::(\w+)::")


def native_site(frames: tuple[tuple, ...]) -> str:
    """The site of an allocation with C++ frames only (the autograd engine's threads, or stacks
    recorded without Python): the backward function that made it ("backward:AddmmBackward0"),
    else the op ("op:mm"), else the innermost frame (an allocator's unwinder says nothing)."""
    names = [f[2] for f in frames]
    for pattern, kind in ((_AUTOGRAD_NODE, "backward"), (_OP, "op")):
        hit = next((m for m in map(pattern.search, names) if m), None)
        if hit:
            return f"{kind}:{hit.group(1)}"
    if any("Engine::thread_main" in n for n in names):
        return "backward"
    return _frame_str(frames[0], full=False)


def site_of(frames: Any) -> str:
    """The top user frame of a block or trace entry, or a placeholder when none was recorded."""
    return frames if isinstance(frames, str) else NO_STACK
