"""Hugging Face `Trainer` callback: track `trainer.train()`, one iteration per optimizer step.

    from memleak.integrations.huggingface import MemleakCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemleakCallback(out="runs/memleak")])
    trainer.train()
    # the run, report.txt, findings.json and plots are in runs/memleak/

Needs ``transformers`` with its torch extra (``pip install 'memleak[huggingface]'``).
Importing this module imports transformers; importing memleak does not.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from pathlib import Path
from typing import Any

from ..schema import DEFAULT_LEVEL
from ._fit import FitCallbackMixin, FitSession
from ._optional import require

transformers = require("transformers", "huggingface", "memleak.integrations.huggingface")

__all__ = ["MemleakCallback"]


class MemleakCallback(FitCallbackMixin, transformers.TrainerCallback):  # type: ignore[name-defined]  # imported at runtime
    """Track memory over `Trainer.train()`: one iteration per optimizer step.

    With gradient accumulation, the steps that only accumulate belong to the
    iteration that the next optimizer step ends. Parameters are those of
    `memleak.track`: ``out`` (folder for the run file and the report; default
    ``<args.output_dir>/memleak``), ``level`` ("auto", the default, "counters", "modules" or "full")
    and any other `memleak.track` option (``budget=``, ``on_leak=``, ...).
    ``print_report`` prints the report when training ends. With several
    processes each writes its own run file; the main process writes the report.

    After training, ``callback.report`` is the `memleak.Report`.
    """

    def __init__(
        self,
        out: str | os.PathLike | None = None,
        level: str = DEFAULT_LEVEL,
        print_report: bool = True,
        **tracker_options: Any,
    ):
        self._session = FitSession(out, level, print_report, tracker_options)
        self._out = None if out is None else Path(out)

    def on_init_end(self, args, state, control, **kwargs):
        # Trainer has no callback for a training loop that raises: guard its train() instead.
        trainer = _calling_trainer()
        if trainer is not None:
            guard_train(trainer, self._session)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        import torch

        out = self._out if self._out is not None else Path(args.output_dir or ".") / "memleak"
        opt = optimizer
        while not isinstance(opt, torch.optim.Optimizer) or type(opt).__module__.startswith("accelerate"):
            opt = getattr(opt, "optimizer", None)  # accelerate wraps the torch optimizer
            if opt is None:
                break
        self._session.start(model, opt, out, report_here=state.is_world_process_zero)
        trainer = _calling_trainer()
        if trainer is not None:  # a callback added after the Trainer was made: guard the next train()
            guard_train(trainer, self._session)
        # A train() that raises unguarded (this one, when the callback came late): never leave hooks
        # behind. Held until the tracker closes, not longer: the exit hook must not keep the fit alive.
        from ..recorder.running import close_at_exit

        assert self._session.tracker is not None  # start() just made it
        close_at_exit(self._session.tracker)

    def on_step_end(self, args, state, control, **kwargs):
        self._session.step()

    def on_train_end(self, args, state, control, **kwargs):
        self._session.finish()


def _calling_trainer():
    """The `transformers.Trainer` whose method is calling this callback (a few frames up), or None.

    Reads the locals of Trainer's own frames only: on Python < 3.13 ``f_locals`` leaves a copy of
    a frame's locals on it, which would keep the caller's objects alive after they are deleted."""
    trainer_file = getattr(sys.modules.get("transformers.trainer"), "__file__", None)
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back
        if frame is None or trainer_file is None:
            return None
        if frame.f_code.co_filename != trainer_file:
            continue
        obj = frame.f_locals.get("self")
        if isinstance(obj, transformers.Trainer):
            return obj
    return None


def guard_train(trainer, session: FitSession) -> None:
    """Make ``trainer.train()`` close the tracker the moment it raises (analysed and saved as at a
    normal end, the error noted; an OOM recorded), then re-raise: Trainer calls no callback then.
    Installed once per trainer, on the instance; the class is left alone."""
    train = trainer.train
    if getattr(train, "_memleak_guard", False):
        return
    ref = weakref.ref(session)

    @functools.wraps(train)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return train(*args, **kwargs)
        except BaseException as exc:
            s = ref()
            if s is not None and s.active:
                s.finish(exc)
            raise

    guarded._memleak_guard = True  # type: ignore[attr-defined]
    trainer.train = guarded
