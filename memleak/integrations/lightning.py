"""Lightning callback: track a fit, one iteration per optimizer step; the run and report land in `out`.

    from memleak.integrations.lightning import MemleakCallback

    trainer = lightning.Trainer(callbacks=[MemleakCallback(out="runs/memleak")])
    trainer.fit(model, loader)
    print(trainer.callbacks[0].report)      # also saved in runs/memleak/

Needs ``lightning`` (``pip install 'memleak[lightning]'``); the older
``pytorch_lightning`` package is used when ``lightning`` is not installed.
Importing this module imports Lightning; importing memleak does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..schema import DEFAULT_LEVEL
from ._fit import FitCallbackMixin, FitSession
from ._optional import MissingDependencyError, require


def _lightning():
    try:
        return require("lightning.pytorch", "lightning", "memleak.integrations.lightning")
    except MissingDependencyError as e:
        try:
            return require("pytorch_lightning", "lightning", "memleak.integrations.lightning")
        except MissingDependencyError:
            raise e from None


pl = _lightning()

__all__ = ["MemleakCallback"]


class MemleakCallback(FitCallbackMixin, pl.Callback):  # type: ignore[name-defined]  # pl is imported at runtime
    """Track memory over `trainer.fit`: one iteration per optimizer step.

    Parameters are those of `memleak.track`: ``out`` (folder for the run file
    and the report; default ``<trainer.default_root_dir>/memleak``), ``level``
    ("auto", the default, "counters", "modules" or "full"), and any other `memleak.track` option
    (``budget=``, ``on_leak=``, ``record_history=``, ...). ``print_report``
    prints the report when the fit ends. With several processes each rank
    writes its own run file; rank 0 writes and prints the report.

    After the fit, ``callback.report`` is the `memleak.Report`.
    """

    def __init__(
        self,
        out: str | os.PathLike | None = None,
        level: str = DEFAULT_LEVEL,
        print_report: bool = True,
        **tracker_options: Any,
    ):
        super().__init__()
        self._session = FitSession(out, level, print_report, tracker_options)
        self._out = None if out is None else Path(out)
        self._last_global_step = 0

    def on_fit_start(self, trainer, pl_module) -> None:
        import torch

        optimizers = [o for o in getattr(trainer, "optimizers", None) or [] if isinstance(o, torch.optim.Optimizer)]
        out = self._out if self._out is not None else Path(trainer.default_root_dir) / "memleak"
        self._last_global_step = trainer.global_step
        self._session.start(pl_module, optimizers or None, out, report_here=trainer.is_global_zero)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # With gradient accumulation (or a skipped AMP step) a batch ends without an optimizer step.
        if trainer.global_step != self._last_global_step:
            self._last_global_step = trainer.global_step
            self._session.step()

    def on_fit_end(self, trainer, pl_module) -> None:
        self._finish(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._finish(trainer, exception)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self._session.active:
            self._finish(trainer)

    def _finish(self, trainer, exc: BaseException | None = None) -> None:
        self._session.finish(exc)
