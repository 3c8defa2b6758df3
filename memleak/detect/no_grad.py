"""A loop run with gradients disabled (inference, evaluation): said in the report, since what
holds memory there is different (no graphs are kept: outputs, caches and metrics are).

Pure over the ``grad_enabled`` column (the grad mode at each step's end, probes/runtime.py).
"""

from __future__ import annotations

import numpy as np

from ..run import Run, step_axis
from ..schema import Finding, Kind, to_jsonable

NAME = "no_grad"
#: At least this share of the steps ended with gradients off: the loop is an inference loop.
INFERENCE_SHARE = 0.5

FIX = (
    "nothing, unless memory grows. Under no_grad no autograd graph is kept, so memory that grows here is held by "
    "outputs, key/value caches or metrics kept across steps (move them to the CPU or reduce them with "
    ".item()). To size the batch for inference, memleak.headroom(step_fn, batch_sizes, input_sizes=...) "
    "measures the peak of an inference step against the batch size and the sequence length."
)


def _stepped(run: Run) -> np.ndarray:
    """Steps in which the optimizer stepped: training steps, whatever the grad mode at their end (a
    step that ends at the optimizer's hook, inside a wrapper's ``@torch.no_grad()`` step, reads off)."""
    if "optimizer_steps" not in run.steps:
        return np.zeros(len(run.steps), dtype=bool)
    n = np.asarray(run.steps["optimizer_steps"], dtype=float)
    before = np.concatenate(([0.0], n[:-1]))
    return np.isfinite(n) & (n > np.where(np.isfinite(before), before, n))


def detect(run: Run) -> list[Finding]:
    if "grad_enabled" not in run.steps:
        return []
    g = np.asarray(run.steps["grad_enabled"], dtype=float)
    known = np.isfinite(g)
    off = known & (g == 0) & ~_stepped(run)
    n, k = int(known.sum()), int(off.sum())
    if n == 0 or k == 0:
        return []
    x = step_axis(run.steps)
    if k >= INFERENCE_SHARE * n:
        where = "the tracked loop (gradients disabled)"
        evidence = (
            f"{k} of {n} steps ended with gradients disabled (torch.no_grad or torch.inference_mode): "
            "an inference or evaluation loop",
        )
    else:
        first, last = x[off][0], x[off][-1]
        where = "evaluation steps (gradients disabled)"
        evidence = (
            f"{k} of {n} steps ended with gradients disabled (steps {first:.0f} to {last:.0f}): evaluation "
            "inside the training run; their memory is that of a forward without graphs",
        )
    return [
        Finding(
            detector=NAME,
            kind=Kind.NO_GRAD,
            location=where,
            bytes_per_step=0.0,
            total_bytes=0.0,
            confidence=1.0,
            evidence=evidence,
            fix=FIX,
            leak=False,
            note=True,
            data=to_jsonable({"steps_without_grad": k, "steps": n}),
        )
    ]
