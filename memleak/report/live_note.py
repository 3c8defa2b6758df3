"""The live check's warning reconciled with the final verdict. While a run is recorded the live
check warns once of a growth it takes for a leak (the `leak_confirmed` event,
recorder/live.py); it sees only the steps so far, so a cache that later stopped filling looks
like a leak there. The report, which sees the whole run, says in one line what became of it."""

from __future__ import annotations

from typing import Any

from ..run import step_axis
from ..schema import Shape, Verdict
from ..units import fmt_bytes

#: The event the live check writes when it warns (docs/run-format.md).
LIVE_WARNING_EVENT = "leak_confirmed"


def live_warning_event(run: Any) -> dict | None:
    """The live check's warning recorded in `run` (its first), or None (none, or a run file
    written before it was recorded)."""
    events = getattr(run, "events", None) or []
    return next((e for e in events if e.get("event") == LIVE_WARNING_EVENT and isinstance(e.get("step"), int)), None)


def live_warning_line(report: Any) -> str | None:
    """One line on the live warning and the final verdict: when the leak was first seen, or
    why the growth it warned of was not one. None for a run whose live check never warned."""
    if report.ranks or not hasattr(report.run, "steps"):
        return None  # a distributed run: each rank's report says it; a snapshot has no live check
    event = live_warning_event(report.run)
    if event is None:
        return None
    step = event["step"]
    rate = f"{event.get('column') or 'memory'} {fmt_bytes(event.get('slope'), signed=True)}/step"
    if report.verdict == Verdict.LEAK:
        return f"the live check first warned of this growth at step {step} ({rate})"
    warned = f"the live check warned at step {step} ({rate})"
    g = report.growth
    if report.verdict != Verdict.CLEAN or g is None:
        return f"{warned}; the whole run does not show that growth lasting: not shown to be a leak"
    return f"{warned}; {_what_became_of_it(report.run, g, step)}: {g.shape}, not a leak"


def live_warning_lines(report: Any) -> list[str]:
    """The live-warning line of a run, or of a distributed run's ranks one by one (``rank R: ...``)."""
    if report.ranks:
        lines = ((rank, live_warning_line(rep)) for rank, rep in report.ranks.items())
        return [f"rank {rank}: {line}" for rank, line in lines if line]
    line = live_warning_line(report)
    return [line] if line else []


def live_warning_dict(report: Any) -> dict | None:
    """The live warning's event fields and the report's line on it, for `Report.to_dict`."""
    line = live_warning_line(report)
    if line is None:
        return None
    event = live_warning_event(report.run) or {}
    return {**{k: v for k, v in event.items() if k != "event"}, "text": line}


def _what_became_of_it(run: Any, growth: Any, step: int) -> str:
    """How the whole run's memory went after the warning, from the growth detector's warm-up and shape."""
    if growth.shape in (Shape.SAWTOOTH, Shape.DROP):
        return "memory was given back later in the run"
    steps = run.steps
    if 0 <= growth.warmup_steps < len(steps):
        end = int(step_axis(steps)[growth.warmup_steps])
        if end > step:
            return f"memory stopped growing after step {end}"
    return "memory did not keep growing over the whole run"
