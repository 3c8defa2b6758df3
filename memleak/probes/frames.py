"""Whose code a frame runs (the user's, a library's, torch's or memleak's), and from there the
user's frames and the creation site of a tensor; the values of a kind the running code holds
(`in_sight`: a DataLoader, a GradScaler); also the ``f_locals`` snapshots reading those frames
leaves behind before Python 3.13.

Split from `holders` (the reference walk starts from these frames).
"""

from __future__ import annotations

import dis
import inspect
import os
import sys
import sysconfig
import types
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch

# With the separator: a user's folder memleak-examples/ beside memleak/ is not memleak's.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_MEMLEAK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIB_DIRS = tuple(
    {
        os.path.realpath(p)
        for p in (
            sysconfig.get_paths().get("stdlib"),
            sysconfig.get_paths().get("purelib"),
            sysconfig.get_paths().get("platlib"),
        )
        if p
    }
)

_internal_code: dict[Any, bool] = {}
_SNAPSHOT_LOCALS = sys.version_info < (3, 13)
#: Frames `in_sight` looks at, from the one that ended the step outwards.
MAX_FRAMES = 64
_CO_OPTIMIZED = 0x0001


# The demo's training loop ships inside memleak but plays the user's part.
_DEMO_FILE = os.path.join(_MEMLEAK_DIR, "demo.py")


def _is_internal_file(filename: str) -> bool:
    if filename == _DEMO_FILE:
        return False
    return filename.startswith(_TORCH_DIR) or filename.startswith(_MEMLEAK_DIR) or filename.startswith("<frozen")


_library_file: dict[str, bool] = {}


def _is_library_file(filename: str) -> bool:
    """True for the standard library and installed packages (cached: realpath costs lstat calls)."""
    hit = _library_file.get(filename)
    if hit is None:
        real = os.path.realpath(filename) if filename and not filename.startswith("<") else filename
        hit = _library_file[filename] = filename != _DEMO_FILE and (
            any(real.startswith(d) for d in _LIB_DIRS) or _generated(filename)
        )
    return hit


#: Code compiled from a string whose name says it is the user's: a notebook cell, typed input.
_TYPED_IN = ("<ipython-input-", "<stdin>")


def _generated(filename: str) -> bool:
    """Code a library compiled from a string at run time (a dataclass's ``__init__`` in ``<string>``,
    an FX graph's ``<eval_with_key>.3``, networkx's ``<... argmap'> compilation 16``, a frozen module):
    walked past like the library's own files, to the user's line that called in."""
    return filename.startswith("<") and not filename.startswith(_TYPED_IN)


def is_user_file(filename: str) -> bool:
    """True for a file of the user's own code: neither torch, memleak nor an installed library."""
    return not _is_internal_file(filename) and not _is_library_file(filename)


def user_code(fn: Any) -> bool:
    """Whether `fn` (a function, a bound method) is code of the user's files."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and is_user_file(code.co_filename)


def is_internal(code) -> bool:
    """True for code in torch or memleak (not the user's)."""
    hit = _internal_code.get(code)
    if hit is None:
        hit = _internal_code[code] = _is_internal_file(code.co_filename)
    return hit


_USER, _SKIP, _NOT_USERS = 0, 1, 2
_OPTIM_DIR = os.path.join(_TORCH_DIR, "optim")
_site_kind: dict[str, int] = {}


def _frame_kind(code) -> int:
    """How a frame counts for a creation site: the user's code; torch, the standard library or an
    installed package (walked past, to the user line that called in); or memleak's own code and
    torch.optim (the tensor is the profiler's or the optimizer's, never the user's)."""
    name = code.co_filename  # by file: equal code objects from two files compare equal
    hit = _site_kind.get(name)
    if hit is None:
        if name == _DEMO_FILE:
            hit = _USER
        elif name.startswith(_MEMLEAK_DIR) or name.startswith(_OPTIM_DIR):
            hit = _NOT_USERS
        elif _is_internal_file(name) or _is_library_file(name):
            hit = _SKIP
        else:
            hit = _USER
        _site_kind[name] = hit
    return hit


#: memleak's frames that stand between a torch op and the code that called it without making its
#: tensors memleak's: the creation-site mode's ``__torch_function__``, inside which an op it
#: dispatches saves tensors for backward (`pass_through`).
_PASS_THROUGH: set[types.CodeType] = set()


def pass_through(code: types.CodeType) -> None:
    """Let `user_site` walk past frames running `code` (memleak's own, otherwise where it stops)."""
    _PASS_THROUGH.add(code)


def makes_no_user_tensors(fn: Callable[..., Any]) -> bool:
    """Whether every tensor `fn` makes (torch.optim's own ``step``, under torch's wrappers) gets no
    creation site: `user_site` stops at its frames."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code is not None and _frame_kind(code) == _NOT_USERS


def user_site(start_depth: int = 1) -> str | None:
    """'file.py:line' of the first frame in the user's code, walking up from `start_depth` past
    torch, the standard library and installed packages; None when memleak's own code or the
    optimizer made the tensor, or no user frame is on the stack."""
    f: types.FrameType | None = sys._getframe(start_depth)
    while f is not None:
        kind = _frame_kind(f.f_code)
        if kind == _USER:
            return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
        if kind == _NOT_USERS and f.f_code not in _PASS_THROUGH:
            return None
        f = f.f_back
    return None


def user_frames(limit: int = 6) -> list[types.FrameType]:
    """The caller's frames outside torch, memleak and installed libraries, innermost first.

    Falls back to the first frames outside torch and memleak when all are library frames
    (a loop driven by a framework)."""
    frames: list[types.FrameType] = []
    fallback: list[types.FrameType] = []
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not is_internal(code):
            if _is_library_file(code.co_filename):
                if len(fallback) < 2:
                    fallback.append(f)
            else:
                frames.append(f)
                if len(frames) >= limit:
                    break
        f = f.f_back
    return frames or fallback


def is_locals_snapshot(frame: types.FrameType, loc: Any) -> bool:
    """True when `loc` (the frame's ``f_locals``) is a dict snapshot the frame keeps (before 3.13)."""
    return _SNAPSHOT_LOCALS and bool(frame.f_code.co_flags & _CO_OPTIMIZED) and type(loc) is dict


def release_snapshots(*held: list[dict]) -> None:
    """Empty the ``f_locals`` snapshots read from function frames that nobody else holds.

    Before Python 3.13, reading a function frame's f_locals leaves a dict snapshot on the frame
    that holds every local's value until the next read: a tensor the loop `del`s would stay
    alive. Empty it (it is rebuilt from the real locals whenever read again). Only a snapshot
    nobody else holds (a user's `d = locals()` is the same dict) is emptied: held by the frame,
    the list, this loop and getrefcount's argument."""
    for snapshots in held:
        for loc in snapshots:
            if sys.getrefcount(loc) <= 4:
                loc.clear()


def in_sight(frame: Any, want: Callable[[Any], bool]) -> dict[int, tuple[str, Any]]:
    """The values `want` accepts held by a local, a global or an attribute of ``self`` in
    `frame` and the frames that called it (memleak's own skipped): {id: (name, value)}."""
    found: dict[int, tuple[str, Any]] = {}
    seen_globals: set[int] = set()
    snapshots: list[dict] = []
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        depth += 1
        if not str(frame.f_globals.get("__name__", "")).startswith("memleak"):
            if _scan(frame, want, found, seen_globals):
                snapshots.append(frame.f_locals)
        frame = frame.f_back
    release_snapshots(snapshots)  # a snapshot of f_locals would keep the loop's deleted locals alive
    return found


def _scan(frame: Any, want: Callable[[Any], bool], found: dict, seen_globals: set[int]) -> bool:
    """Add what `want` accepts in one frame to `found`; whether its f_locals is a snapshot."""
    loc = frame.f_locals
    spaces = [("", loc)]
    this = loc.get("self")
    if hasattr(this, "__dict__"):
        spaces.append(("self.", vars(this)))
    if id(frame.f_globals) not in seen_globals:
        seen_globals.add(id(frame.f_globals))
        spaces.append(("", frame.f_globals))
    for prefix, space in spaces:
        for name, v in list(space.items()):
            if id(v) not in found and want(v):
                found[id(v)] = (prefix + str(name), v)
    return is_locals_snapshot(frame, loc)


_STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF")
_FOR_ITER = bytes([dis.opmap["FOR_ITER"]])


@lru_cache(maxsize=512)
def loop_variables(code: types.CodeType) -> frozenset[str]:
    """The names a ``for`` statement of `code` binds (``for cb in self.callbacks:``, ``for i, (x, y)
    in enumerate(loader):``): each still names the last item after the loop, an alias of what the
    iterated container holds, which is the better name for it (read from the bytecode: the store
    or unpacking right after each FOR_ITER)."""
    if _FOR_ITER not in code.co_code:  # no loop (dis of a long function costs a millisecond)
        return frozenset()
    ins = list(dis.get_instructions(code))
    names: set[str] = set()
    for i, op in enumerate(ins[:-1]):
        if op.opname != "FOR_ITER":
            continue
        j, want = i + 1, 1  # stores still to read, unpackings adding theirs
        while want and j < len(ins):
            nxt = ins[j]
            if nxt.opname == "UNPACK_SEQUENCE":
                want += (nxt.arg or 1) - 1
            elif nxt.opname in _STORES:
                names.add(nxt.argval)
                want -= 1
            elif nxt.opname.startswith("STORE_FAST_") and isinstance(nxt.argval, tuple):  # 3.13's pairs
                stored = nxt.argval if nxt.opname == "STORE_FAST_STORE_FAST" else nxt.argval[:1]
                names.update(stored)
                want -= len(stored)
                if nxt.opname != "STORE_FAST_STORE_FAST":
                    break  # STORE_FAST_LOAD_FAST: the body has begun
            else:
                break
            j += 1
    return frozenset(names)
