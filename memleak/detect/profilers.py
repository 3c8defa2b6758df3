"""A profiler left recording: torch.profiler (and the autograd profiler) keeps an event for every
op it sees, with shapes, stacks and memory when asked, in host memory until it stops. A loop that
profiles every step grows host memory at a steady rate that no Python holder explains: no walk
reaches the events, they are the profiler's native allocations.

Pure over the ``profiler_on`` column (probes/runtime.py) and the host series. Real cases: a
recipe whose profiler was never stopped ran out of host memory (meta-pytorch/torchtune #2522);
Lightning's ``profiler="pytorch"`` grew RAM every epoch until the OOM killer stopped the run
(Lightning-AI/pytorch-lightning #10717, #11480).
"""

from __future__ import annotations

import numpy as np

from ..run import Run
from ..schema import Finding, Kind, to_jsonable
from .growth import analyze_growth
from .thresholds import min_rel_growth

NAME = "profilers"
COLUMN = "profiler_on"
LOCATION = "torch.profiler"
#: The share of the growing steps the profiler must have recorded at: a schedule that records a
#: few steps now and then hands each trace on and frees it, and is no cause of steady growth.
RECORDING_SHARE = 0.9

FIX = (
    "A profiler recorded at every step, and it keeps an event for every operator in host memory "
    "until it stops: profile a few steps only, with a schedule "
    "(`torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1), "
    "on_trace_ready=...)` and `prof.step()` at each iteration), or call `prof.stop()` (leave the "
    "`with profile():` block) once the steps you need are recorded; in Lightning, run long trainings "
    "with `profiler=None`."
)


def detect(run: Run) -> list[Finding]:
    host = run.host_column()
    if COLUMN not in run.steps or host is None:
        return []
    on = np.asarray(run.steps[COLUMN], dtype=float)
    if not np.nansum(on):
        return []
    # On an accelerator run the heap must rise more (the device libraries' per-shape caches creep
    # benignly); a profiler recording throughout is a known steady grower, so the heap is judged as
    # on a CPU run. On an H200 the corpus's profiler never stopped grew the heap by less than 1 %.
    throughout = np.nansum(on == 1) >= RECORDING_SHARE * len(on)
    device_run = run.memory_column() != host and not throughout
    g = analyze_growth(run, host, min_rel=min_rel_growth(host, accelerator=device_run))
    if not g.leak:
        return []
    growing = on[g.warmup_steps :]
    recorded = int(np.nansum(growing == 1))
    if recorded < RECORDING_SHARE * len(growing):
        return []
    steps = np.asarray(run.steps["step"])
    first = int(steps[np.flatnonzero(on == 1)[0]])
    evidence = (
        f"a profiler was recording at {recorded} of the {len(growing)} steps in which {host} grew "
        f"(from step {first} on): it keeps an event for every op until it stops, where no variable "
        f"reaches them",
        *g.evidence,
    )
    return [
        Finding(
            detector=NAME,
            kind=Kind.PROFILER,
            location=LOCATION,
            bytes_per_step=g.slope,
            total_bytes=g.slope * max(1, len(growing) - 1),
            confidence=min(0.9, g.confidence),
            evidence=evidence,
            fix=FIX,
            leak=True,
            data=to_jsonable({"profiler": True, "host_column": host, "recorded_steps": recorded, "first": first}),
        )
    ]
