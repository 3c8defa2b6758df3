"""Evidence from the ModuleProbe (the ``modules`` records): module outputs still alive steps
after their forward, and the forward memory of a module that caches tensors on itself."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ..records import ModulesRecord
from ..schema import Kind
from ..units import fmt_bytes
from .culprit_table import Entries, entry
from .survivors import MIN_COHORTS, MIN_SURVIVING_SHARE


def module_evidence(modules: Sequence[ModulesRecord], findings: Entries) -> None:
    """Add kept module outputs to the leak of about the same size (or make an entry when there is
    no leak at all), and each caching module's forward memory to its cached attribute."""
    if not modules:
        return
    kept, eligible = _kept_outputs(modules)
    leaks = sorted((lf for lf in findings.items() if lf[1].get("leak")), key=lambda lf: -lf[1]["bps"])
    for path, n, per in kept[:3]:
        ev = (
            f"outputs of {path}'s forward from {n} of the last {len(eligible)} sampled steps are still alive "
            f"({fmt_bytes(per)} per step)"
        )
        match = next((f for loc, f in leaks if f["bps"] > 0 and 0.3 <= per / f["bps"] <= 3.0), None)
        if match is not None:
            match["evidence"].append(ev)
        elif not leaks:
            f = entry(findings, path, kind=Kind.SURVIVING_TENSORS)
            f.update(
                leak=True,
                confidence=0.6,
                bps=per,
                total=per * n,
                fix=(
                    f"something keeps the outputs of `{path}` alive from step to step: a forward hook or a "
                    f"container that stores them. Store `output.detach().cpu()` or a summary, clear it each "
                    f'step, or remove the hook; run with level="full" to name the holder.'
                ),
            )
            f["evidence"].append(ev)
    measured = [m for m in modules if m.counter]  # the detail steps that read forward bytes
    if measured:
        _caching_module_forwards(measured[-1], findings)


def _kept_outputs(modules: Sequence[ModulesRecord]) -> tuple[list[tuple[str, int, float]], list[int]]:
    """Modules whose forward outputs from most recent sampled steps are still alive two or more
    steps later, as (path, steps kept, median bytes per step), biggest first; and the steps checked."""
    last = modules[-1]
    alive: dict[str, dict[int, float]] = defaultdict(dict)  # path -> birth step -> bytes still alive
    for out in last.alive:
        alive[out.path][out.born] = out.bytes
    detail_steps = sorted({r.step for r in modules})
    eligible = [d for d in detail_steps if d <= last.step - 2][-8:]
    kept = []
    for path, by_born in alive.items():
        k = [b for b in eligible if b in by_born]
        if len(eligible) >= MIN_COHORTS and len(k) >= MIN_COHORTS and len(k) / len(eligible) >= MIN_SURVIVING_SHARE:
            kept.append((path, len(k), float(np.median([by_born[b] for b in k]))))
    kept.sort(key=lambda x: -x[2])
    return kept, eligible


def _caching_module_forwards(last: ModulesRecord, findings: Entries) -> None:
    """How often the module owning a cached attribute runs its forward, and what that allocates."""
    rows = {r.path: r for r in last.modules}
    for loc, f in findings.items():
        if f["kind"] == Kind.CACHED_TENSOR and "." in loc:
            owner = loc.rsplit(".", 1)[0]
            r = rows.get(owner)
            if r is not None and r.calls:
                steps = max(1, last.steps)
                f["evidence"].append(
                    f"{owner} runs its forward {r.calls / steps:.0f} time(s) per step, "
                    f"allocating {fmt_bytes(r.fwd_bytes)} per step"
                )
