"""The creation-site mode and the saved-tensor hooks of one deep step, and the thread they live in.

Torch keeps function modes and default saved-tensor hooks per thread: what one thread pushes,
only that thread can pop. A `Tagging` is installed in the thread that started the tracker (the
only thread the TensorProbe tags in) and remembers that thread. When the step ends in another
thread (a loop driven from several threads), the Tagging cannot be popped from there: it turns
inert at once (its mode and hooks pass everything through and hold nothing of the probe's) and
is swept off its thread's stacks the next time memleak runs in that thread (the next deep step,
or the tracker's close). Only a tracker closed in a thread other than the one it started in can
leave an inert Tagging behind, until memleak next runs in that thread.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import DeviceContext

from . import warn_sites
from .frames import pass_through

# Tensors tagged per deep step, at most (a very large step is sampled, not walked whole).
MAX_TAGS = 20000

_lock = threading.Lock()
# thread ident -> Taggings made inert there while their thread was elsewhere, oldest first
_inert: dict[int, list[Tagging]] = {}
# `Tagging._pop` where the mode or hooks are off this thread's stacks for a while: not now, nothing wrong
NOT_NOW = "not now"


#: torch's own `disable_saved_tensors_hooks`, which `aside` wraps while a Tagging is installed
_disable_hooks = torch.autograd.graph.disable_saved_tensors_hooks
_wrapped = 0  # Taggings whose hooks are on a stack, for `_wrap_disable` and `_unwrap_disable`
_wrap_lock = threading.Lock()


class Tagger(Protocol):
    """What a Tagging reports to (the TensorProbe; a protocol, so that this module need not import it)."""

    n_tags: int

    def _tag(self, out: Any) -> None: ...

    def _pack(self, t: torch.Tensor) -> Any: ...


class Box:
    """What the pack hook hands autograd: the saved tensor itself, in a weakly referenced box."""

    __slots__ = ("t", "version", "of", "__weakref__")

    def __init__(self, t, version, of=""):
        self.t = t
        self.version = version
        self.of = of  # `saved_view_of`


def saved_view_of(t: torch.Tensor) -> str:
    """The custom autograd Function whose output `t` is a view of, made in its forward (so before
    the output had a grad_fn: a leaf), or "": a Function that saves such a view for backward keeps
    its output alive from inside its own graph, a cycle in C++ that only a backward frees
    (pytorch#94990)."""
    if not (t._is_view() and t.is_leaf):
        return ""
    fn = getattr(t._base, "grad_fn", None)
    if not isinstance(fn, torch.autograd.function.BackwardCFunction):
        return ""
    return type(fn).__name__.removesuffix("Backward")


def unpack(box):
    """The saved tensor back from its box (anything else untouched), with autograd's version check."""
    if not isinstance(box, Box):
        return box
    t = box.t
    if box.version is not None and t._version != box.version:  # what autograd checks without hooks, kept with them
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: [{t.type()} {list(t.shape)}] is at version {t._version}; expected version "
            f"{box.version} instead. (memleak's saved-tensor tracking reports what autograd would.)"
        )
    return t


class _BirthMode(TorchFunctionMode):
    """Tags tensors that torch functions return with the step and the user's creation site."""

    def __init__(self, tagging: Tagging):
        super().__init__()
        self.tagging = tagging

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if torch.compiler.is_compiling():  # traced by dynamo (folded): the graph gets the op alone
            return func(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        p = self.tagging.probe
        if p is not None and p.n_tags < MAX_TAGS:  # None: inert, its step ended in another thread
            try:
                p._tag(out)
            except Exception:
                pass
        return out


# a tensor an op saves for backward while the mode dispatches it is the op caller's, not memleak's
pass_through(_BirthMode.__torch_function__.__code__)
# and a warning torch issues there is the caller's too (shown at their line, while a mode is on)
warn_sites.watch_code(_BirthMode.__torch_function__.__code__, globals())


def stacks_empty() -> bool:
    """No torch function mode (but the default device's) and no saved-tensor hook is active in this thread.

    The default device's mode (``torch.set_default_device``, ``with torch.device(...)``) keeps itself
    at the bottom of the stack and puts back the modes above it when it closes, so memleak's
    mode is safe over it; any other mode closing mid-step would pop memleak's in place of its own.
    """
    n = torch._C._len_torch_function_stack()
    if any(not isinstance(torch._C._get_function_stack_at(i), DeviceContext) for i in range(n)):
        return False
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is None


class Tagging:
    """The mode and saved-tensor hooks of one deep step, pushed in this thread by `__init__`."""

    def __init__(self, probe: Tagger):
        self.thread = threading.get_ident()
        # the backward pass this step began in (-1: none): inside one, this thread's modes and hooks
        # are the autograd engine's copy, put back as they were when it returns
        self.task = torch._C._current_graph_task_id()
        self.probe: Tagger | None = probe  # None once inert
        # each None once popped
        self.hooks: torch.autograd.graph.saved_tensors_hooks | None = torch.autograd.graph.saved_tensors_hooks(
            self.pack, unpack
        )
        self.hooks.__enter__()
        _wrap_disable()
        self.mode: _BirthMode | None = _BirthMode(self)
        warn_sites.install()
        self.mode.__enter__()
        self.paused = False  # the mode is off the stack for a while (`pause`)

    def pack(self, t: torch.Tensor) -> Any:
        p = self.probe
        return t if p is None or torch.compiler.is_compiling() else p._pack(t)

    def pause(self) -> None:
        """Take the mode off the stack for a stretch where no tensor made gets a creation site (torch's
        own optimizer step: a mode there costs a Python call per op for nothing), if this is its
        thread and it is on top."""
        n = torch._C._len_torch_function_stack()
        if (
            self.mode is not None
            and not self.paused
            and threading.get_ident() == self.thread
            and n
            and torch._C._get_function_stack_at(n - 1) is self.mode
        ):
            self.mode.__exit__(None, None, None)
            self.paused = True

    def resume(self) -> None:
        """Put the mode back after `pause`."""
        if self.paused and self.mode is not None and threading.get_ident() == self.thread:
            self.paused = False
            self.mode.__enter__()

    def remove(self) -> str | None:
        """Turn inert, and pop the mode and hooks if this is their thread and they are on top; else
        leave them to `sweep` in their thread. Returns why they stayed, when something of someone
        else's was left open over them (the probe stops tagging then), else None."""
        self.probe = None
        if threading.get_ident() != self.thread:
            why = None
        else:
            why = self._pop()
            if why is None:
                return None
        with _lock:
            _inert.setdefault(self.thread, []).append(self)
        return None if why is NOT_NOW else why

    def _pop(self) -> str | None:
        """Pop the mode, then the hooks, each only if on top of this thread's stack; None when both went,
        NOT_NOW when they will be back on the stack later (a backward pass, see `task`; the mode's
        own dispatch of the op the step ended in)."""
        task = torch._C._current_graph_task_id()
        if task != self.task:
            if task != -1:  # a backward pass's copy of the stacks: ours are under it
                return NOT_NOW
            # pushed inside a backward pass (an optimizer stepped from a gradient hook) that has
            # returned: they went with its copy of the stacks
            if self.mode is not None:
                warn_sites.uninstall()
            if self.hooks is not None:
                _unwrap_disable()
            self.mode = self.hooks = None
            return None
        if self.mode is not None and not self.paused and _dispatching(self.mode):
            return NOT_NOW
        n = torch._C._len_torch_function_stack()
        if self.paused:  # off the stack already (the step ended inside the optimizer's)
            self.mode, self.paused = None, False
            warn_sites.uninstall()
        if self.mode is not None:
            if not (n and torch._C._get_function_stack_at(n - 1) is self.mode):
                return "a torch function mode was left open over memleak's"
            self.mode.__exit__(None, None, None)
            self.mode = None
            warn_sites.uninstall()
        if self.hooks is not None:
            if torch._C._autograd._top_saved_tensors_default_hooks(False) != (self.pack, unpack):
                return "a saved-tensor hook was left open over memleak's"
            self.hooks.__exit__(None, None, None)
            self.hooks = None
            _unwrap_disable()
        return None


def _dispatching(mode: _BirthMode) -> bool:
    """This thread runs inside `mode`'s own `__torch_function__`, which torch calls with the mode
    taken off the stack and pushes back after: a step that ends in an op the mode dispatches
    (`loss.backward()`, where `memleak run` ends the iterations of a script with no module)."""
    frame = sys._getframe(1)
    code = _BirthMode.__torch_function__.__code__
    while frame is not None:
        if frame.f_code is code and frame.f_locals.get("self") is mode:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@contextlib.contextmanager
def aside(error_message: str) -> Iterator[None]:
    """`torch.autograd.graph.disable_saved_tensors_hooks` while a Tagging is installed: torch.func's
    transforms (grad, vjp, jacrev, hessian) refuse to run under any saved-tensor hook, so memleak's
    step aside (where on top of this thread's stack) for as long as the transform runs, its saved
    tensors untracked, and come back after it."""
    top = torch._C._autograd._top_saved_tensors_default_hooks(False)
    ours = top is not None and top[1] is unpack and isinstance(getattr(top[0], "__self__", None), Tagging)
    if ours:
        torch._C._autograd._pop_saved_tensors_default_hooks()
    try:
        with _disable_hooks(error_message):
            yield
    finally:
        if ours:
            torch._C._autograd._push_saved_tensors_default_hooks(*top)


def _wrap_disable() -> None:
    global _wrapped
    with _wrap_lock:
        if _wrapped == 0:
            torch.autograd.graph.disable_saved_tensors_hooks = aside
        _wrapped += 1


def _unwrap_disable() -> None:
    global _wrapped
    with _wrap_lock:
        _wrapped = max(0, _wrapped - 1)
        if _wrapped == 0 and torch.autograd.graph.disable_saved_tensors_hooks is aside:
            torch.autograd.graph.disable_saved_tensors_hooks = _disable_hooks


def sweep() -> None:
    """Pop this thread's inert Taggings that are on top of its stacks (newest first), and forget
    those of threads that ended."""
    if not _inert:
        return
    me = threading.get_ident()
    with _lock:
        mine = _inert.pop(me, [])
        alive = {t.ident for t in threading.enumerate()}
        for ident in [i for i in _inert if i not in alive]:
            for gone in _inert.pop(ident):  # a thread's modes and hooks end with it
                if gone.mode is not None:
                    warn_sites.uninstall()
                if gone.hooks is not None:
                    _unwrap_disable()
    left: list[Tagging] = []
    for tagging in reversed(mine):
        if left or tagging._pop() is not None:
            left.append(tagging)
    if left:
        with _lock:
            _inert.setdefault(me, [])[:0] = reversed(left)
