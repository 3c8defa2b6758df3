"""The report as text: a verdict line, a ranked table, then each suspect's evidence and fix."""
from __future__ import annotations

import textwrap

from ..units import fmt_bytes

WIDTH = 100


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def headline(report) -> str:
    """One sentence: the verdict and why."""
    g = report.growth
    verdict = report.verdict.value.upper()
    if report.leak:
        top = report.suspects[0]
        what = f"{top.kind.value} at {top.location}"
        if top.bytes_per_step:
            what += f", {fmt_bytes(top.bytes_per_step, signed=True)} per step"
        line = f"LEAK: {what}"
        if g is not None and g.steps_to_full:
            line += (f"; at this rate the {'device' if g.column == 'allocated_bytes' else 'memory'} is full in "
                     f"about {g.steps_to_full:,.0f} steps ({_duration(g.seconds_to_full)})")
        return line
    if g is None:
        return verdict
    if verdict == "CLEAN":
        return f"CLEAN: no sustained growth in {g.column} over {g.n_steps} steps after warm-up ({g.shape})"
    return f"INCONCLUSIVE: {'; '.join(g.evidence[:1]) or 'too few steps to decide'}"


def _table(suspects) -> list[str]:
    rows = [("#", "kind", "location", "per step", "total", "conf")]
    for i, s in enumerate(suspects, 1):
        rows.append((str(i), s.kind.value, s.location, fmt_bytes(s.bytes_per_step, signed=True),
                     fmt_bytes(s.total_bytes), f"{s.confidence:.2f}"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    widths[2] = min(widths[2], 48)
    out = []
    for r in rows:
        loc = r[2] if len(r[2]) <= widths[2] else r[2][: widths[2] - 1] + "…"
        cells = (r[0].rjust(widths[0]), r[1].ljust(widths[1]), loc.ljust(widths[2]),
                 r[3].rjust(widths[3]), r[4].rjust(widths[4]), r[5].rjust(widths[5]))
        out.append("  " + "  ".join(cells))
    return out


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=" " * len(indent)) or [indent]


def suspect_lines(suspects, heading: str) -> list[str]:
    """The ranked table, then each suspect's evidence and fix."""
    if not suspects:
        return ["", "no suspects."]
    lines = ["", heading] + _table(suspects)
    for i, s in enumerate(suspects, 1):
        lines += ["", f"{i}. {s.kind.value} at {s.location}  (confidence {s.confidence:.2f})"]
        for e in s.evidence:
            lines += _wrap(e, "   - ")
        lines += _wrap("fix: " + s.fix, "   ")
    return lines


def render(report) -> str:
    run = report.run
    meta = getattr(run, "meta", {}) or {}
    lines = [f"memleak report: {getattr(run, 'path', None) or '(in-memory run)'}"]
    steps = getattr(run, "steps", None)
    if steps is not None and len(steps):
        span = steps["time"].iloc[-1] if "time" in steps else None
        device = meta.get("device", "?")
        if meta.get("device_name"):
            device += f" ({meta['device_name']})"
        lines.append(f"  {len(steps)} steps over {_duration(span)} on {device}, level {meta.get('level', '?')}")
    if getattr(run, "truncated", False):
        lines.append("  note: the run file was cut short (the process was killed); every whole step before that was read")
    lines.append("")
    lines.append("verdict: " + headline(report))
    g = report.growth
    growth_is_a_suspect = any("growth" in s.detectors for s in report.suspects)
    for e in (g.evidence if g is not None and not growth_is_a_suspect else ()):
        lines += _wrap(e, "  - ")
    lines += suspect_lines(report.suspects, "suspects, most likely first:")
    for e in getattr(run, "events", []):
        if e.get("event") == "oom":
            lines += ["", f"out of memory at step {e.get('step')}: {e.get('message', '')}"]
        elif e.get("event") == "snapshot":
            lines += ["", f"memory snapshot written: {e.get('path')} (open it with memleak.load or pytorch.org/memory_viz)"]
    for p in report.problems:
        lines += _wrap("note: " + p, "")
    return "\n".join(lines)
