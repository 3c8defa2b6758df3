"""torch.autocast's cast cache kept open around the loop: inside an autocast block (its cast cache
on, the default), the lower-precision copy of each leaf tensor that requires grad is cached, keyed by
the tensor, until the outermost block exits. Entered once around the whole loop, a block that sees
new leaf tensors every step (a fresh head per episode, parameters made in the loop) keeps a copy of
each of them for the rest of the run, in native memory no variable reaches.

Pure over the ``autocast_cached`` column (probes/runtime.py) and the run's memory series. Real cases:
"AMP leaks memory when you use AMP outside of your training loop" with fresh parameters each
iteration (pytorch/pytorch #48049), cache entries never cleared (pytorch/pytorch #86136), casts of
fp32 weights cached (ecmwf/anemoi-core #134, fixed with ``cache_enabled=False``).
"""

from __future__ import annotations

import numpy as np

from ..run import Run
from ..schema import Finding, Kind, to_jsonable
from .growth import analyze_growth

NAME = "autocast"
COLUMN = "autocast_cached"
LOCATION = "torch.autocast cast cache"
#: The share of the growing steps that must have ended inside the block: one entered around the
#: forward of each step (the usual way) is closed at the step's end, and clears its cache there.
OPEN_SHARE = 0.9
#: Below the holders a walk names (a list that keeps tensors explains growth directly); the
#: cache's share is inferred from the block being open, not measured.
CONFIDENCE = 0.6

FIX = (
    "The loop ran inside one torch.autocast block, and its cast cache keeps a lower-precision copy of "
    "every leaf tensor that requires grad it casts until the outermost block exits: new parameters "
    "each step (a fresh head, weights made in the loop) add a copy each. Enter autocast inside the "
    "step, around the forward and the loss only (`with torch.autocast(...): loss = ...`, backward and "
    "optimizer.step() outside), or call torch.clear_autocast_cache() at the end of each step, or "
    "pass cache_enabled=False. If the loop makes no new leaf tensors, look for another cause."
)


def detect(run: Run) -> list[Finding]:
    column = run.memory_column()
    if COLUMN not in run.steps or column is None:
        return []
    on = np.asarray(run.steps[COLUMN], dtype=float)
    if not np.nansum(on):
        return []
    g = analyze_growth(run, column)
    if not g.leak:
        return []
    growing = on[g.warmup_steps :]
    open_steps = int(np.nansum(growing == 1))
    if open_steps < OPEN_SHARE * len(growing):
        return []
    evidence = (
        f"a torch.autocast block with its cast cache was open at the end of {open_steps} of the "
        f"{len(growing)} steps in which {column} grew: the loop runs inside it, and the cache keeps a "
        "cast of each leaf tensor that requires grad until the block exits, where no variable reaches it",
        *g.evidence,
    )
    return [
        Finding(
            detector=NAME,
            kind=Kind.CACHED_TENSOR,
            location=LOCATION,
            bytes_per_step=g.slope,
            total_bytes=g.slope * max(1, len(growing) - 1),
            confidence=min(CONFIDENCE, g.confidence),
            evidence=evidence,
            fix=FIX,
            leak=True,
            data=to_jsonable({"autocast": True, "open_steps": open_steps}),
        )
    ]
