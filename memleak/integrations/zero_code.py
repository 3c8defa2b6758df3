"""`memleak run script.py [args...]`: track a training script without changing it.

The script runs in this process as ``python script.py args...`` would run it
(``runpy``, ``__name__ == "__main__"``, ``sys.argv`` set to the script and its
arguments, the script's folder first on ``sys.path``). memleak finds the
script's iterations and its model by itself:

- **iterations**: a global optimizer step hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``) sees every
  ``optimizer.step()``. The first optimizer that steps ends each iteration
  (with two optimizers, as in a GAN, one boundary per round); if another
  optimizer steps twice in a row without it, or it is freed, that one takes
  over (a second training phase with a new optimizer). A step a GradScaler
  skipped still ends its iteration (memleak/recorder/boundaries.py).
- **without an optimizer** (weights updated by hand, or inference only): each
  backward pass through the model's output ends an iteration, and while no
  backward pass was seen, each call of the model does; the first optimizer
  step seen later takes over. With no module either (weights as plain tensors),
  each backward pass does, from the second on (``torch.autograd.backward`` is
  wrapped until a model or an optimizer step starts tracking, else while the
  script runs: `_backward.py`). The report says which boundary was used.
- **the model**: until tracking starts, global module forward hooks note the
  modules called at the top level (not from inside another module). At the
  first optimizer step, the one that holds most of its parameters is the model
  the tracker attaches its module probes to (or the module that owns it, where
  that trains nothing else: a LightningModule whose ``training_step`` calls a
  submodule); when a module with parameters is
  called at the top level a second time before any optimizer step, that module
  is the model, and tracking starts there. Those global hooks are removed when
  tracking starts, so the rest of the run pays nothing for them.

Tracking starts at the first optimizer step or that second call (what ran
before is used to find the model), and every hook is removed when the script
ends, also when it raises. The run and the report are written into ``--out``
and the report is printed.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MemleakError, UsageError
from ..schema import DEFAULT_LEVEL, LEVELS

if TYPE_CHECKING:
    from ..recorder import Tracker

DEFAULT_OUT = "memleak-run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run a Python script (or, with -m, a module) unchanged, with memleak tracking "
        "each optimizer step; then write the run and the report into --out and print the "
        "report. memleak's options come before the script; everything after it goes to the script."
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder for the run and the report (default: %(default)s)")
    parser.add_argument(
        "--level",
        default=DEFAULT_LEVEL,
        choices=LEVELS,
        help="what to record (default: %(default)s); see memleak.track",
    )
    parser.add_argument("--device", default=None, help="device whose memory to watch (default: the model's)")
    parser.add_argument(
        "--budget",
        default=None,
        help="memory the projection counts against, e.g. '16 GiB' (default: the device's total)",
    )
    parser.add_argument("--check", action="store_true", help="exit with status 1 when the verdict is leak")
    parser.add_argument(
        "-m", dest="as_module", action="store_true", help="the target is a module name, run as `python -m` would"
    )
    parser.add_argument("target", metavar="script.py", help="the script to run (a module name with -m)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


class ZeroCodeSession:
    """The global hooks of one `memleak run`: finds the model and the iterations, owns the Tracker."""

    def __init__(self, out: str | os.PathLike | None, level: str = DEFAULT_LEVEL, **tracker_options: Any):
        self.out = out
        self.level = level
        self.tracker_options = tracker_options
        self.tracker: Tracker | None = None
        self.model_name: str | None = None
        self._handles: list[Any] = []
        self._module_handles: list[Any] = []
        self._depth = 0
        self._roots: dict[int, tuple[weakref.ref, int]] = {}  # id -> (module, top-level calls)
        self._anchor: weakref.ref | None = None
        self._since_anchor: dict[int, int] = {}
        self.start_error: BaseException | None = None
        self._unwrap_backward: Callable[[], None] = lambda: None  # puts torch.autograd.backward back (_backward.py)
        self._backwards = 0  # backward passes begun before tracking started
        self.backward_driven = False  # no model nor optimizer step: each backward pass ends an iteration

    # ------------------------------------------------------------ install / remove
    def install(self) -> ZeroCodeSession:
        import torch.nn.modules.module as module_hooks
        import torch.optim.optimizer as optimizer_hooks

        self._module_handles = [
            module_hooks.register_module_forward_pre_hook(self._pre_forward),
            module_hooks.register_module_forward_hook(self._post_forward, always_call=True),
        ]
        self._handles.append(optimizer_hooks.register_optimizer_step_post_hook(self._on_step))
        from ._backward import wrap_backward

        self._unwrap_backward = wrap_backward(self._before_backward, self._after_backward)
        return self

    def _remove_module_hooks(self) -> None:
        for h in self._module_handles:
            h.remove()
        self._module_handles.clear()
        self._roots.clear()
        self._depth = 0

    def close(self, exc: BaseException | None = None) -> None:
        """Remove every global hook and stop the tracker. Idempotent."""
        self._remove_module_hooks()
        self._unwrap_backward()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self.tracker is not None:
            # the script has ended and its globals are gone: an iteration a hook saw end is not
            # recorded now, when what it held has been freed
            self.tracker._boundaries.drop_pending()
            self.tracker.close(exc)

    # ------------------------------------------------------------ hooks
    def _pre_forward(self, module, args) -> None:
        if self._depth == 0:
            ref, calls = self._roots.get(id(module), (None, 0))
            if ref is None or ref() is not module:
                ref, calls = weakref.ref(module), 0
            self._roots[id(module)] = (ref, calls + 1)
            if calls + 1 == 2 and self.tracker is None and self.start_error is None and _has_parameters(module):
                self._start_guarded(module, None)  # no optimizer step yet: this call begins iteration 0
                return
        self._depth += 1

    def _post_forward(self, module, args, output) -> None:
        self._depth = max(0, self._depth - 1)

    def _before_backward(self) -> None:
        if self.start_error is not None:
            return
        if self.tracker is None:
            self._backwards += 1
            if self._backwards == 2:  # the first iteration is over: no model was called, no optimizer stepped
                self.backward_driven = True
                self._start_guarded(None, None)
        elif self.backward_driven and self.tracker.active:
            self.tracker._boundaries.before_backward()

    def _after_backward(self) -> None:
        if self.backward_driven and self.tracker is not None and self.tracker.active:
            self.tracker._boundaries.after_backward()

    def _on_step(self, optimizer, args, kwargs) -> None:
        if self.start_error is not None:
            return
        if self.tracker is None:
            self._start_guarded(self._find_model(optimizer), optimizer)
            return
        if not self.tracker.active:
            return
        anchor = self._anchor() if self._anchor is not None else None
        if optimizer is anchor:  # the tracker's own hook on it ended the iteration
            self._since_anchor.clear()
            return
        n = self._since_anchor.get(id(optimizer), 0) + 1
        self._since_anchor[id(optimizer)] = n
        if anchor is not None and n < 2:
            return
        self._anchor = weakref.ref(optimizer)  # the first to step, or the old one is gone or no longer steps
        self._since_anchor.clear()
        self.tracker._follow_optimizer(optimizer)

    def _start_guarded(self, model, optimizer) -> None:
        try:
            self._start(model, optimizer)
        except Exception as e:  # never break the user's script: say so at its end
            self.start_error = e
            self.close()

    def _start(self, model, optimizer) -> None:
        from ..recorder import Tracker

        self._remove_module_hooks()
        if not self.backward_driven:  # a model or an optimizer marks iterations: the wrapper is not needed
            self._unwrap_backward()
        self._anchor = weakref.ref(optimizer) if optimizer is not None else None
        self.model_name = type(model).__name__ if model is not None else None
        self.tracker = Tracker(model, optimizer=optimizer, out=self.out, level=self.level, **self.tracker_options)
        self.tracker._boundaries.grace = 0  # tracking started at the model's second call already
        self.tracker.start()

    def _find_model(self, optimizer):
        """The top-level module called before this step that holds most of the optimizer's parameters."""
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        best, best_key = None, (0, 0)
        for ref, calls in self._roots.values():
            module = ref()
            if module is None:
                continue
            held = sum(1 for p in module.parameters() if id(p) in params)
            if held and (held, calls) > best_key:
                best, best_key = module, (held, calls)
        return _owner(best, params) if best is not None else None

    @property
    def steps(self) -> int:
        """Iterations tracked so far."""
        return self.tracker.iterations if self.tracker is not None else 0


def _owner(module, params: set[int]):
    """The module that owns `module` and trains nothing else with grad than the optimizer does (a
    LightningModule whose training_step calls ``self.body(x)``, never its own forward), climbing
    while there is one such parent: its attributes, the user's own, are then named from the model.
    Not a parent that trains other parameters too (an ensemble's list, a GAN's pair). Once, at the
    start."""
    for _ in range(4):
        parents = _parents(module)
        if len(parents) != 1 or any(p.requires_grad and id(p) not in params for p in parents[0].parameters()):
            break
        module = parents[0]
    return module


def _parents(module) -> list:
    """The modules whose ``_modules`` table holds `module` (each referrer scan walks the heap once)."""
    import gc

    import torch

    tables = [d for d in gc.get_referrers(module) if type(d) is dict]
    if not tables:
        return []
    # the module's own __dict__ (a dict object once materialized) may stand between it and its table
    holders = gc.get_referrers(*tables)
    dicts = [h for h in holders if type(h) is dict]
    holders += gc.get_referrers(*dicts) if dicts else []
    found = {id(m): m for m in holders if isinstance(m, torch.nn.Module) and any(m._modules is t for t in tables)}
    return list(found.values())


def _has_parameters(module) -> bool:
    return next(iter(module.parameters()), None) is not None


def run_target(
    target: str, args: list[str], as_module: bool = False, keep: list | None = None
) -> tuple[int, BaseException | None]:
    """Run a script or module as `python` would. Returns its exit status and the exception it
    ended with, if any (its traceback is printed, as Python would). KeyboardInterrupt propagates.
    `keep`: gets the script's globals when it ends, so that what they hold outlives the script
    until the tracker closes (its last collection must not count the script's own end as garbage)."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        sys.argv = [target, *args]  # with -m, runpy puts the module's file name in argv[0]
        if as_module:
            sys.path.insert(0, os.getcwd())
            namespace = runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(Path(target).resolve().parent))
            namespace = runpy.run_path(target, run_name="__main__")
        if keep is not None:
            keep.append(namespace)
        return 0, None
    except SystemExit as e:
        if e.code is None:
            return 0, None
        if isinstance(e.code, int):
            return e.code, None
        print(e.code, file=sys.stderr)
        return 1, None
    except KeyboardInterrupt:
        raise
    except Exception as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next  # show the script's frames, not memleak's and runpy's
        traceback.print_exception(type(e), e, tb)
        return 1, e
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _save(report, out) -> str:
    """Save the report into `out`; the line that says so, or "" when it could not be written
    (said on stderr: the script ran, and its report is still shown)."""
    try:
        report.save(out)
    except (OSError, UsageError) as e:
        print(f"memleak: the report could not be written into {out}: {e}", file=sys.stderr)
        return ""
    return f"\nmemleak: run and report written to {out}/"


def main(args: argparse.Namespace) -> int:
    target = args.target
    if not args.as_module and not Path(target).is_file():
        raise UsageError(f"{target}: no such script (to run a module, use memleak run -m {target})")
    options: dict[str, Any] = {}
    if args.device:
        import torch

        try:
            torch.device(args.device)
        except (RuntimeError, ValueError):
            raise UsageError(f"--device {args.device!r} is not a device: write e.g. cpu, cuda or cuda:1") from None
        options["device"] = args.device
    if args.budget:
        from ..units import parse_bytes

        options["budget"] = parse_bytes(args.budget)  # a bad value fails here, before the script runs
    session = ZeroCodeSession(args.out, level=args.level, **options)
    session.install()
    status, failure, error = 0, None, None
    script_globals: list = []
    try:
        status, failure = run_target(target, list(args.args), args.as_module, keep=script_globals)
    except BaseException as e:  # KeyboardInterrupt: still close and report what was recorded
        error = e
    finally:
        session.close(error or failure)  # an OOM is recorded in the run
        script_globals.clear()
    sys.stdout.flush()
    name = f"-m {target}" if args.as_module else target
    if session.start_error is not None:
        raise MemleakError(
            f"{name}: memleak could not start tracking (the script ran untracked): {session.start_error!r}"
        ) from session.start_error
    if session.tracker is None or session.steps == 0:
        msg = (
            f"{name}: no iteration was tracked: memleak run marks an iteration at each optimizer.step(), "
            "else at each backward pass, else at each call of the model (a module "
            "with parameters called twice), and the script made "
            + ("only one" if session.tracker is not None else "none")
            + "; wrap the loop in memleak.track(...) and call tracker.step() instead"
        )
        if error is not None:
            raise error
        if status:
            print(f"memleak: {msg}", file=sys.stderr)
            return status
        raise UsageError(msg)
    report = session.tracker.report()
    written = _save(report, args.out)
    _print_summary(session, name, report)
    if written:
        print(written)
    if error is not None:
        raise error
    if status:
        return status
    return 1 if (args.check and report.leak) else 0


def _print_summary(session: ZeroCodeSession, name: str, report: Any) -> None:
    """What was tracked, what ended its iterations, then the report."""
    from ..report.text import boundary_words

    model = f", model {session.model_name}" if session.model_name else ", no model found (no module probes)"
    print(f"\nmemleak: tracked {session.steps} iterations of {name}{model}")
    boundary = boundary_words(report.run)
    if boundary:
        print(f"memleak: {boundary}")
    print(report)
