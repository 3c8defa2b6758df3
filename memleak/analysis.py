"""`memleak.analyze`: a recorded run (one rank or many) or a PyTorch memory snapshot in, a Report out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .detect import run_detectors
from .detect.divergence import RankOutcome, detect_divergences
from .detect.growth import analyze_growth
from .detect.snapshot import detect_snapshot
from .detect.snapshot_growth import detect_snapshot_growth
from .detect.stale import confirm_after_sampling
from .detect.thresholds import MIN_REL_GROWTH
from .errors import UsageError
from .run import MultiRun, Run
from .schema import HOST_COLUMNS, Finding, Kind, Shape, Verdict
from .snapshot import Snapshot
from .suspects import rank, rank_across

if TYPE_CHECKING:
    from .report import Report

#: A suspect this sure of a leak makes the verdict "leak".
LEAK_CONFIDENCE = 0.5


def analyze(run: Any) -> Report:
    """Run every detector over what `memleak.load` returns (a `Run`, a multi-rank
    `MultiRun`, or a PyTorch memory `Snapshot`) and rank what they found."""
    if isinstance(run, Run):
        return _analyze_run(run)
    if isinstance(run, MultiRun):
        return _analyze_ranks(run)
    if isinstance(run, Snapshot):
        return _analyze_snapshot(run)
    raise UsageError(f"analyze() takes what memleak.load() returns, not {type(run).__name__}")


def _analyze_run(run: Run) -> Report:
    from .report import Report

    growth = analyze_growth(run)
    findings, problems = run_detectors(run)
    findings = confirm_after_sampling(run, findings)
    suspects = rank(findings, measured_bps=growth.slope if growth is not None else 0.0, host_bps=_host_slope(run))
    growth = _growth_shown(run, growth, findings, suspects)
    return Report(
        run=run,
        verdict=decide(growth, suspects),
        suspects=suspects,
        findings=findings,
        growth=growth,
        problems=[*run.problems, *problems],
    )


def _host_slope(run: Run) -> float | None:
    """Host memory's slope (the C heap, else RSS) on a device run, where the primary series is the
    device's; None on a host run, whose primary series is host memory already."""
    host = run.host_column()
    if host is None or host == run.memory_column():
        return None
    return analyze_growth(run, host).slope


def _growth_shown(run: Run, growth, findings: list[Finding], suspects) -> Any:
    """The growth the verdict quotes: where the top suspect is a holder of Python data backed by a
    host series (RSS, which the primary series of a CPU run, the heap, barely sees), a profiler
    (host memory on a device run), or RSS itself growing beside a flat heap, that series."""
    if not suspects or not suspects[0].leak:
        return growth
    top = suspects[0].location
    data = [f.data for f in findings if f.location == top and isinstance(f.data, dict)]
    col = next((d.get("host_column") for d in data if d.get("python_objects") or d.get("profiler")), None)
    if col is None and suspects[0].kind == Kind.LINEAR_GROWTH and top in HOST_COLUMNS:
        col = top  # RSS growing where the C heap stays flat (detect/growth.py)
    if not col or growth is None or col == growth.column:
        return growth
    shown = analyze_growth(run, col, min_rel=MIN_REL_GROWTH)
    return shown if shown.leak else growth


def _analyze_ranks(run: MultiRun) -> Report:
    """Each rank's report; the verdict over all ranks ("leak" if any rank leaks, "clean" if
    all are clean); suspects ranked across ranks; the ranks that diverge."""
    from .report import Report

    reports = {r: _analyze_run(x) for r, x in run.ranks.items()}
    verdicts = [rep.verdict for rep in reports.values()]
    if Verdict.LEAK in verdicts:
        verdict = Verdict.LEAK
    elif verdicts and all(v == Verdict.CLEAN for v in verdicts):
        verdict = Verdict.CLEAN
    else:
        verdict = Verdict.INCONCLUSIVE
    findings = [
        Finding(
            f.detector,
            f.kind,
            f"rank {r}: {f.location}",
            f.bytes_per_step,
            f.total_bytes,
            f.confidence,
            f.evidence,
            f.fix,
            f.leak,
            f.data,
            f.note,
        )
        for r, rep in reports.items()
        for f in rep.findings
    ]
    # the growth shown with the verdict: the fastest-growing leaking rank, else the fastest-growing one
    by_growth = sorted(reports.values(), key=lambda rep: (rep.leak, _slope(rep)), reverse=True)
    problems = list(run.problems)
    for r, rep in reports.items():
        problems += [f"rank {r}: {p}" for p in rep.problems if f"rank {r}: {p}" not in problems]
    outcomes = {
        r: RankOutcome(
            rep.leak,
            _slope(rep),
            f"{rep.suspects[0].kind.value} at {rep.suspects[0].location}" if rep.suspects else None,
        )
        for r, rep in reports.items()
    }
    return Report(
        run=run,
        verdict=verdict,
        suspects=rank_across({r: rep.suspects for r, rep in reports.items()}),
        findings=findings,
        growth=by_growth[0].growth if by_growth else None,
        problems=problems,
        ranks=reports,
        divergences=detect_divergences(run, outcomes),
    )


def _analyze_snapshot(snap: Snapshot) -> Report:
    """One moment of the caching allocator: fragmentation findings, and, from its allocation
    history where recorded, the lines whose allocations keep surviving (a leak verdict)."""
    from .report import Report

    findings = detect_snapshot(snap) + detect_snapshot_growth(snap)
    suspects = rank(findings)
    leak = any(s.leak and s.confidence >= LEAK_CONFIDENCE for s in suspects)
    verdict = Verdict.LEAK if leak else Verdict.INCONCLUSIVE
    return Report(run=snap, verdict=verdict, suspects=suspects, findings=findings)


def _slope(report: Report) -> float:
    return float(getattr(report.growth, "slope", 0.0) or 0.0)


def decide(growth, suspects) -> Verdict:
    """The verdict: a leak when a suspect is sure enough; inconclusive when the run is too
    short or grows without proof (linear growth, steady or not, that no suspect is sure enough
    of: memory that keeps rising is never called clean); else clean."""
    if any(s.leak and s.confidence >= LEAK_CONFIDENCE for s in suspects):
        return Verdict.LEAK
    if growth.shape in (Shape.TOO_SHORT, Shape.NO_DATA, Shape.LINEAR):
        return Verdict.INCONCLUSIVE
    return Verdict.CLEAN
