"""Steps a GradScaler skipped, counted from the scaler itself (outside any compiled region).

A GradScaler that finds inf or NaN gradients does not call ``optimizer.step()``, so no step hook
sees that iteration end. Its ``update()`` runs every iteration all the same, and updates the loss
scale in place: the scale tensor's version counter goes up by one per ``update()``. At an optimizer
step (inside ``scaler.step()``, before that iteration's ``update()``), the updates since the last
step, less the one that followed it, are the iterations whose step was skipped. Reading a version
counter neither syncs the device nor touches compiled code, so this works for compiled models too.

The scaler is the one whose ``step()`` is calling the optimizer (found a few frames up), or, for
skips before the first step, the one in sight when tracking starts. Both are held weakly.

One update per iteration holds only while no other optimizer steps between two steps of the one
that ends iterations: a WGAN's critic may step (and the scaler update) five times per generator
step, a GAN's two optimizers share one update. A global step hook counts the other optimizers'
steps; where any stepped, the updates are not counted.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.optim.optimizer as optimizer_hooks

from ..probes.frames import is_locals_snapshot, release_snapshots
from .outside_compile import add_step_hook

MAX_FRAMES = 8  # scaler.step -> _maybe_opt_step -> the optimizer's step wrapper -> its hooks -> here


def calling_scaler(frame: Any) -> Any:
    """The torch.amp GradScaler whose ``step()`` is running in `frame` or a caller, or None."""
    scaler_file = getattr(sys.modules.get("torch.amp.grad_scaler"), "__file__", None)
    for _ in range(MAX_FRAMES):
        if frame is None or scaler_file is None:
            return None
        if frame.f_code.co_filename == scaler_file:
            held = [frame.f_locals]  # only in this list: release_snapshots counts the references
            scaler = held[0].get("self")
            if is_locals_snapshot(frame, held[0]):
                release_snapshots(held)  # the snapshot would keep the frame's locals alive
            if isinstance(scaler, torch.amp.GradScaler):
                return scaler
        frame = frame.f_back
    return None


def _none() -> Any:
    return None


class ScalerSkips:
    """Counts the iterations a GradScaler skipped between two optimizer steps."""

    def __init__(self) -> None:
        self._scaler: Callable[[], Any] = _none
        self._scale: Callable[[], Any] = _none  # its scale tensor when last seen (None: not made yet)
        self._version = 0
        self._updates_since = 0  # updates expected since then: 1 after a step, 0 at the start
        self._ending: Callable[[], Any] = _none  # the optimizer whose steps end iterations
        self._others = 0  # steps of other optimizers since its last step
        self.other_steps = 0  # ... and since tracking began (recorder/boundaries.py)
        self._handle: Any = None

    def start(self, ending: Any, scaler: Any = None) -> None:
        """Count from now on the skipped steps of `ending`, the optimizer whose steps end
        iterations; `scaler`: the one in sight when tracking starts, if any."""
        self._ending = weakref.ref(ending)
        if self._handle is None:
            self._remember(scaler, updates_since=0)
            me = weakref.ref(self)

            def post(optimizer: Any, *_: Any) -> None:
                counter = me()
                if counter is not None and optimizer is not counter._ending():
                    counter._others += 1
                    counter.other_steps += 1

            # empty where dynamo traces it: a compiled step adds no skip to count (outside_compile.py)
            self._handle = add_step_hook(
                optimizer_hooks.register_optimizer_step_post_hook, optimizer_hooks._global_optimizer_post_hooks, post
            )

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def at_step(self, frame: Any) -> int:
        """At a step of the optimizer that ends iterations, called from `frame`: the iterations
        skipped since the last one (0 when the step is not a GradScaler's)."""
        scaler = calling_scaler(frame)
        skipped = self._count(scaler)
        self._remember(scaler, updates_since=1)
        return skipped

    def at_close(self) -> int:
        """When tracking ends: the iterations skipped after the last step."""
        skipped = self._count(self._scaler())
        self.forget()
        return skipped

    def forget(self) -> None:
        """Count nothing until the next step."""
        self._remember(None, updates_since=0)

    def _count(self, scaler: Any) -> int:
        scale = getattr(scaler, "_scale", None)
        others, self._others = self._others, 0
        if others or scaler is None or scaler is not self._scaler() or not isinstance(scale, torch.Tensor):
            return 0
        if scale is not self._scale():
            if self._scale() is not None or self._updates_since:
                return 0  # replaced (a loaded state): nothing to compare with
            self._version = 0  # made since tracking started: every update since is one skip
        return max(0, scale._version - self._version - self._updates_since)

    def _remember(self, scaler: Any, updates_since: int) -> None:
        scale = getattr(scaler, "_scale", None)
        self._scaler = weakref.ref(scaler) if scaler is not None else _none
        if isinstance(scale, torch.Tensor) and getattr(scaler, "_enabled", False):
            self._scale, self._version = weakref.ref(scale), scale._version
        else:
            self._scale, self._version = _none, 0
        self._updates_since = updates_since
