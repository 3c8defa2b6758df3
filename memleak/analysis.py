"""`memleak.analyze`: a Run in, a Report out."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .detect import run_detectors
from .errors import UsageError
from .run import Run
from .schema import Verdict
from .suspects import rank

if TYPE_CHECKING:
    from .report import Report

#: A suspect this sure of a leak makes the verdict "leak".
LEAK_CONFIDENCE = 0.5


def analyze(run) -> "Report":
    """Run every detector over a recorded run and rank what they found.

    Accepts what `memleak.load` returns: a `Run`, a multi-rank run, or a
    PyTorch memory `Snapshot`.
    """
    from .report import Report
    if hasattr(run, "analyze") and not isinstance(run, Run):  # Snapshot, multi-rank run
        return run.analyze()
    if not isinstance(run, Run):
        raise UsageError(f"analyze() takes what memleak.load() returns, not {type(run).__name__}")
    from .detect.growth import analyze_growth
    growth = analyze_growth(run)
    findings, problems = run_detectors(run)
    suspects = rank(findings)
    return Report(run=run, verdict=decide(growth, suspects), suspects=suspects, findings=findings,
                  growth=growth, problems=[*run.problems, *problems])


def decide(growth, suspects) -> Verdict:
    if any(s.leak and s.confidence >= LEAK_CONFIDENCE for s in suspects):
        return Verdict.LEAK
    if growth.shape in ("too_short", "no_data") or (growth.shape == "linear" and not growth.leak):
        return Verdict.INCONCLUSIVE
    return Verdict.CLEAN
