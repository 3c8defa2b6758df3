"""Where one iteration ends, when the loop does not say so itself.

Sources, strongest first (`schema.Boundary`); once a stronger one is seen, weaker ones mark nothing:

- ``tracker.step()`` (or a watched function returning): the loop says so.
- ``optimizer.step()`` of the optimizer that ends each iteration (the last one given). An
  iteration whose step was skipped (a GradScaler that found inf or NaN gradients does not call
  ``optimizer.step()``) still ends. Two signs show it, and each skipped iteration is recorded at
  the next optimizer step, just before that step ends its own iteration (the count is right, and
  every record is taken between iterations); where both see a skip, it counts once (the larger
  of their counts):

  - the GradScaler's own updates (`scaler_skips.py`): one per iteration, read from outside any
    compiled region, so this one works for compiled models too;
  - a gradient hook on one parameter of that optimizer (parameters pickle and copy without their
    hooks): a backward pass reaching it with its gradient reset (``zero_grad``) since the last
    backward pass and no optimizer step in between ends an iteration that had no step (a loop that
    skips the step itself, without a scaler); so does tracking's end in that state. The autograd
    engine calls it outside compiled code, so it works for compiled models too; where a compiled
    function calls ``backward()`` itself, dynamo is kept out of the hook (`outside_compile.py`).
    The same hook sees a step no step hook saw: where the whole training step is compiled, dynamo
    traces ``optimizer.step()`` and its hooks are empty there; the parameter updated in place since
    the last backward pass says the step ran, and ends its iteration (not a skip), at the next
    backward pass or at close. The probes then keep their hooks and modes out (``compiled``).
    Backward passes inside ``optimizer.step()`` (an LBFGS closure) never count, and with several
    optimizers any one's step counts as a step in between: a GAN's discriminator step may follow a
    backward pass that also wrote the generator's gradients.
- when no optimizer step was seen and the loop has not called ``tracker.step()`` (yet): each
  backward pass through the model's output (weights updated by hand), or, with no model, each
  backward pass (`before_backward`: ``memleak run`` wraps ``torch.autograd.backward``), and
  before any backward pass, each call of the model (inference). Under ``memleak.track`` the
  first `GRACE` of them end none: a loop that calls ``tracker.step()`` calls it before, and its
  first iteration is not split (what a hook saw end is dropped); one that does not has its first
  iteration span them.

What the hooks see in the middle of a step (a backward pass may end in an autograd thread) is
recorded at the next point where the loop is between iterations: the model's next call, the
next optimizer step, ``tracker.step()``, or the tracker's close. The model's calls are seen by
global module hooks filtered by identity (nothing is attached to the user's modules, so they pickle
and copy as they were; they cost every module call a little, so they are installed only for a
model given without an optimizer, and removed at the first ``tracker.step()``) and a
pre-hook on the autograd node of the model's output, gone with its graph. Every hook holds this
object only weakly, and does nothing once it is removed.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.modules.module as module_hooks

from ..probes.frames import makes_no_user_tensors
from ..probes.identity import is_compiled
from ..probes.scaler import find_scaler
from ..schema import Boundary
from .options import has_step_hooks
from .outside_compile import add_step_hook, only_memleaks_step_hooks, outside_dynamo, step_compiled_before
from .scaler_skips import ScalerSkips

STRENGTH = {None: -1, Boundary.FORWARD: 0, Boundary.BACKWARD: 1, Boundary.OPTIMIZER: 2, Boundary.CALL: 3}
# memleak.track: the first calls of the model and backward passes end no iteration (`grace`: a
# loop that calls tracker.step() calls it before more than this many; memleak run sets none).
GRACE = 3
# Output nodes whose hooks are removed at close; older graphs are gone (or kept by a leak, where
# the hook stays inert).
MAX_NODE_HANDLES = 64


def _first_grad_fn(out: Any) -> Any:
    """The autograd node of the first output tensor that has one (outputs may be tuples or dicts)."""
    if isinstance(out, torch.Tensor):
        return out.grad_fn
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for o in out[:8]:
            if isinstance(o, torch.Tensor) and o.grad_fn is not None:
                return o.grad_fn
    return None


class Boundaries:
    """Decides when an iteration ends; `end(kind, skipped)` records it (the Tracker's, under its lock)."""

    def __init__(self, end: Callable[[Boundary, bool], None], in_optimizer: Callable[[bool], None] = lambda on: None):
        self._end = end
        self._in_optimizer = in_optimizer  # told when torch's own optimizer step starts and ends (`_hook_optimizer`)
        self._paused: list[bool] = []  # per optimizer.step() running, whether it told `in_optimizer`
        self.mode: Boundary | None = None  # the strongest source seen so far
        self.kind: Boundary | None = None  # that of the last iteration recorded (the Tracker sets it)
        self.pending: Boundary | None = None  # seen in a hook, recorded at the next safe point
        self.skips_seen = 0  # iterations without a step the gradient hook saw end, not yet recorded
        self.scaler_skips = ScalerSkips()
        self.skipped = 0
        self.optimizer_steps: int | None = None  # steps of the optimizer that ends iterations, once hooked
        self.in_step = 0  # inside some optimizer.step()
        self.backward_since = False  # a backward pass through the model since the last optimizer step
        self._param: Callable[[], Any] = lambda: None  # the parameter whose gradient shows skipped steps
        # its gradient (weakly) after the last backward pass, the gradient's version and its own
        self._grad: tuple[Any, int, int] | None = None
        self.compiled = False  # an optimizer step was seen only by what it changed: it ran compiled
        self._others_at = 0  # other optimizers' steps (scaler_skips.other_steps) at the last backward pass
        self._done: Callable[[], None] | None = None  # the backward pass's end callback, once made
        self._model_ref: Callable[[], Any] = lambda: None
        self._model_id = 0
        self._handles: list[Any] = []
        self._opt_handles: list[Any] = []
        self._param_handles: list[Any] = []  # the gradient hook (`_hook_parameter`), off once tracker.step() ends steps
        self._node_handles: deque[Any] = deque(maxlen=MAX_NODE_HANDLES)
        self.grace = GRACE  # calls of the model and backward passes still to end no iteration
        self.active = False

    # ------------------------------------------------------------ install / remove
    def install(self, model: Any, optimizers: list[Any]) -> None:
        """Hook the optimizers (the last one ends each iteration) and, with none, the model's calls."""
        self.active = True
        if optimizers and self.mode is not Boundary.CALL:
            self.mode = Boundary.OPTIMIZER
        for i, opt in enumerate(optimizers):
            self._hook_optimizer(opt, ending=i == len(optimizers) - 1)
        if optimizers:
            self.optimizer_steps = 0
            self.scaler_skips.start(optimizers[-1], find_scaler(sys._getframe(1)))
        if optimizers and self.mode is Boundary.OPTIMIZER:
            self._hook_parameter(optimizers[-1])  # the autograd engine calls it, compiled model or not
        if is_compiled(model):
            return  # under torch.compile, module hooks would run inside the compiled region
        if model is None or self.mode is not None:
            return
        self._model_ref, self._model_id = weakref.ref(model), id(model)
        me = weakref.ref(self)

        def pre(module, args):
            b = None if torch.compiler.is_compiling() else me()  # traced by dynamo: empty (folded)
            if b is not None and id(module) == b._model_id and module is b._model_ref():
                b._on_call()

        def post(module, args, output):
            b = None if torch.compiler.is_compiling() else me()
            if b is not None and id(module) == b._model_id and module is b._model_ref():
                b._on_return(output)

        # registered before the probes' hooks: a step that ends at a call ends before they see it
        self._handles.append(module_hooks.register_module_forward_pre_hook(pre))
        self._handles.append(module_hooks.register_module_forward_hook(post))

    def _hook_optimizer(self, opt: Any, ending: bool) -> None:
        if not has_step_hooks(opt):
            return  # it never ran Optimizer.__init__ (a wrapper): no step hooks run; tracker.step() ends steps
        if step_compiled_before(opt):
            return  # a hook would recompile the step: it is seen by `_stepped_unseen`, as traced hooks are
        me = weakref.ref(self)
        # torch.optim's own step makes no tensor of the user's, unless it calls a closure or a hook
        torchs = makes_no_user_tensors(type(opt).step)

        def pre(optimizer: Any, args: tuple, kwargs: dict) -> None:
            b = me()
            if b is not None:
                b.in_step += 1
                # args[0] is the optimizer itself; anything more is a closure
                quiet = torchs and len(args) <= 1 and not kwargs and only_memleaks_step_hooks(optimizer)
                b._paused.append(quiet)
                if quiet:
                    b._in_optimizer(True)

        def post(optimizer: Any, *_: Any) -> None:
            b = me()
            if b is not None:
                if b._paused and b._paused.pop():
                    b._in_optimizer(False)
                b._on_optimizer_step(ending)

        # empty where dynamo traces them: a step compiled whole is seen by `_stepped_unseen`
        self._opt_handles += [
            add_step_hook(opt.register_step_pre_hook, opt._optimizer_step_pre_hooks, pre),
            add_step_hook(opt.register_step_post_hook, opt._optimizer_step_post_hooks, post),
        ]

    def _hook_parameter(self, opt: Any) -> None:
        """A gradient hook on the first trainable parameter of `opt`: each backward pass that reaches
        it, before its gradient is accumulated."""
        p = next((p for g in opt.param_groups for p in g["params"] if p.requires_grad), None)
        if p is None:
            return
        self._param = weakref.ref(p)
        self._param_handles.append(p.register_hook(outside_dynamo(self._backward_start_hook())))

    def follow(self, optimizer: Any) -> None:
        """From now on `optimizer` ends each iteration (``memleak run``: another optimizer took over,
        or the first one stepped after tracking began without one); this step of it ends one."""
        self._remove_hooks(self._opt_handles, self._param_handles, self._handles, self._node_handles)
        self.in_step = 0
        self._paused.clear()
        self._hook_optimizer(optimizer, ending=True)
        self.scaler_skips.start(optimizer)
        if self.optimizer_steps is None:
            self.optimizer_steps = 0
        if self.mode is not Boundary.CALL:
            self._hook_parameter(optimizer)
            self.mode = Boundary.OPTIMIZER
            self.pending = None  # a backward pass seen to end: this step ends that same iteration
            self._on_optimizer_step(True)

    def remove(self) -> None:
        """Remove every hook; those left in graphs the user keeps turn inert."""
        self.active = False
        self.scaler_skips.remove()
        self._remove_hooks(self._handles, self._opt_handles, self._param_handles, self._node_handles)

    @staticmethod
    def _remove_hooks(*handle_lists: Any) -> None:
        for handles in handle_lists:
            for h in handles:
                h.remove()
            handles.clear()

    # ------------------------------------------------------------ events
    def on_step_call(self) -> bool:
        """tracker.step() was called: whether it ends an iteration. The first call takes over;
        right after an optimizer step it confirms the iteration that step ended."""
        if self.mode is Boundary.CALL:
            return True
        if self.mode is Boundary.OPTIMIZER and self.backward_since and not self.in_step and self._stepped_unseen():
            self.compiled = True  # the first iteration's step ran compiled: the probes keep out of it
        if self.mode is not Boundary.CALL:
            # the model's calls, the backward passes and a GradScaler's skipped steps no longer
            # matter: no cost for them in the user's steps (the optimizer's step hooks still count its steps)
            self.scaler_skips.remove()
            self._remove_hooks(self._handles, self._node_handles, self._param_handles)
        self.mode = Boundary.CALL
        self.pending, self.skips_seen = None, 0
        return self.kind is not Boundary.OPTIMIZER

    def flush(self) -> None:
        """When tracking ends: record the iteration a hook saw end, if any, and those skipped after
        the last optimizer step (a GradScaler updated after it, or gradients reset after the last
        backward pass with no step in between, as the next backward pass would have seen)."""
        self._record_pending()
        if self.mode is Boundary.OPTIMIZER and self.active:
            self._step_or_skip_since_backward(in_backward=False)
            self._end_skipped(self.scaler_skips.at_close())

    def drop_pending(self) -> None:
        """Forget the iterations seen to end but not yet recorded, skipped ones too (``memleak run``
        at the script's end: what they held is gone)."""
        self.pending, self.skips_seen = None, 0
        self.scaler_skips.forget()

    def _record_pending(self) -> None:
        kind = self.pending
        if kind is not None:
            self.pending = None
            self._end(kind, False)

    def _end_skipped(self, scaler_skips: int) -> None:
        """Record the iterations whose optimizer step was skipped: as many as the sign that saw
        more of them counted (both may see the same ones)."""
        skipped, self.skips_seen = max(self.skips_seen, scaler_skips), 0
        for _ in range(skipped):
            self._end(Boundary.OPTIMIZER, True)

    def _on_optimizer_step(self, ending: bool) -> None:
        self.in_step = max(0, self.in_step - 1)
        self.backward_since = False
        if ending and self.optimizer_steps is not None:
            self.optimizer_steps += 1
        if ending and self.mode is not Boundary.CALL and self.in_step == 0:
            self._record_pending()
            self._end_skipped(self.scaler_skips.at_step(sys._getframe(1)))
            self._end(Boundary.OPTIMIZER, False)

    def _step_or_skip_since_backward(self, in_backward: bool) -> None:
        """A backward pass starts, or tracking ends: whether the iteration of the last backward pass
        ended with no step seen (gradients reset, weights as they were: a skipped step), or with one
        no step hook saw (weights changed in place: the step ran inside compiled code)."""
        if not self.backward_since or self.in_step:
            return
        if self._stepped_unseen():
            self.backward_since = False
            self.compiled = True
            if self.optimizer_steps is not None:
                self.optimizer_steps += 1
            self._record_pending()
            self._end_skipped(0)
            # in a backward pass (not at close) the autograd engine has turned gradients off; the
            # loop that called backward() had them on: the step is recorded as the loop ran it
            with torch.enable_grad() if in_backward else contextlib.nullcontext():
                self._end(Boundary.OPTIMIZER, False)
        elif self._grads_reset() and self.scaler_skips.other_steps == self._others_at:
            # no step of another optimizer either, one memleak was not given too: a GAN's generator
            # step after a backward pass that also wrote the discriminator's gradients is a step
            self.backward_since = False
            self.skips_seen += 1

    def _on_call(self) -> None:
        if self.mode is not Boundary.CALL and not self.in_step:
            self._record_pending()

    def _on_return(self, output: Any) -> None:
        if self.mode is Boundary.CALL:
            return
        gf = _first_grad_fn(output)
        if gf is not None:
            self._node_handles.append(gf.register_prehook(self._backward_start_hook()))
        self._seen_end(Boundary.FORWARD)

    def _backward_start_hook(self) -> Callable[[Any], None]:
        """A gradient hook (on a parameter or the model output's grad_fn) that says a backward pass
        started; it holds these boundaries weakly, so a hook left behind keeps nothing alive."""
        me = weakref.ref(self)

        def hook(_grad: Any) -> None:
            b = me()
            if b is not None and b.active:
                b._on_backward_start()

        return hook

    def _on_backward_start(self) -> None:
        """A backward pass reached the model's output or the hooked parameter (several hooks in one
        pass each queue the end callback: what it does may be done twice)."""
        if self.mode is Boundary.CALL:
            return
        if self.mode is Boundary.OPTIMIZER:
            self._step_or_skip_since_backward(in_backward=True)
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_end_callback())  # type: ignore[attr-defined]
        except RuntimeError:  # not inside a backward pass after all
            pass

    def _backward_end_callback(self) -> Callable[[], None]:
        """What the autograd engine calls when the backward pass ends; made once (keeping it out of
        dynamo costs microseconds a wrap), holding these boundaries weakly."""
        if self._done is None:
            me = weakref.ref(self)

            def done() -> None:
                b = me()
                if b is not None and b.active:
                    b._on_backward_end()

            self._done = outside_dynamo(done)
        return self._done

    def _on_backward_end(self) -> None:
        self.backward_since = True
        self._others_at = self.scaler_skips.other_steps
        if self.mode is Boundary.OPTIMIZER:
            self._grad = self._grad_state()
        else:
            self._seen_end(Boundary.BACKWARD)

    def _seen_end(self, kind: Boundary) -> None:
        """A call of the model returned, or a backward pass ended: it ends the iteration, unless a
        stronger source ends them or the first few are still to pass (`grace`)."""
        if STRENGTH[self.mode] > STRENGTH[kind] or self.in_step:
            return
        if not self.grace:
            self.mode = self.pending = kind
        self.grace = max(0, self.grace - 1)

    def before_backward(self) -> None:
        """`memleak run` of a script with no model and no optimizer step: a backward pass is about
        to start (the function that starts them is wrapped, `zero_code`). The iteration the last
        one ended, weights updated since, is recorded now."""
        if self.active and self.mode is not Boundary.CALL and not self.in_step:
            self._record_pending()

    def after_backward(self) -> None:
        """...and it ended: it ends this iteration, recorded at the next one's start or at close."""
        self._on_backward_end()

    # ------------------------------------------------------------ gradients
    def _grad_state(self) -> tuple[Any, int, int] | None:
        """The hooked parameter's gradient (weakly) and its version (zero_grad drops it, set_to_none,
        or zeroes it in place), and the parameter's own version (an optimizer step updates it in
        place)."""
        p = self._param()
        g = None if p is None else p.grad
        return None if g is None or p is None else (weakref.ref(g), g._version, p._version)

    def _stepped_unseen(self) -> bool:
        """The hooked parameter changed in place since the last backward pass, and no step hook ran:
        the optimizer stepped inside a compiled function, where dynamo traced its hooks away
        (outside_compile.py)."""
        state, p = self._grad, self._param()
        return state is not None and p is not None and p._version != state[2]

    def _grads_reset(self) -> bool:
        state, p = self._grad, self._param()
        if state is None or p is None:
            return False
        g = p.grad
        return g is None or g is not state[0]() or g._version != state[1]
