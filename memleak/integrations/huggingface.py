"""Hugging Face `Trainer` callback: track `trainer.train()`, one iteration per optimizer step.

    from memleak.integrations.huggingface import MemleakCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemleakCallback(out="runs/memleak")])
    trainer.train()
    # the run, report.txt, findings.json and plots are in runs/memleak/

Needs ``transformers`` with its torch extra (``pip install 'memleak[huggingface]'``).
Importing this module imports transformers; importing memleak does not.
"""

from __future__ import annotations

import os
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

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        import torch

        out = self._out if self._out is not None else Path(args.output_dir or ".") / "memleak"
        opt = optimizer
        while not isinstance(opt, torch.optim.Optimizer) or type(opt).__module__.startswith("accelerate"):
            opt = getattr(opt, "optimizer", None)  # accelerate wraps the torch optimizer
            if opt is None:
                break
        self._session.start(model, opt, out, report_here=state.is_world_process_zero)
        # Trainer has no callback for a training loop that raises: never leave hooks behind. Held
        # until the tracker closes, not longer: the exit hook must not keep this callback's fit alive.
        from ..recorder.running import close_at_exit

        assert self._session.tracker is not None  # start() just made it
        close_at_exit(self._session.tracker)

    def on_step_end(self, args, state, control, **kwargs):
        self._session.step()

    def on_train_end(self, args, state, control, **kwargs):
        self._session.finish()
