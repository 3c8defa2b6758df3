"""The report as text: a verdict line, a ranked table, then each suspect's evidence and fix."""

from __future__ import annotations

import textwrap

import pandas as pd

from ..schema import Kind, Shape, Verdict
from ..snapshot import site_of
from ..units import fmt_bytes, fmt_duration, where_ranks
from .live_note import live_warning_lines

WIDTH = 100

# What ended each iteration (the `boundary` events; schema.Boundary)
BOUNDARY_WORDS = {
    "call": "each tracker.step() (or call of the watched function)",
    "optimizer": "each optimizer.step()",
    "backward": "each backward pass (no optimizer step was seen)",
    "forward": "each call of the model (no optimizer step nor backward pass was seen)",
}


def headline(report) -> str:
    """One sentence: the verdict and why."""
    if report.ranks:
        return _ranks_headline(report)
    if not hasattr(report.run, "steps") and not report.leak:
        if report.run.trace.empty:
            return (
                "INCONCLUSIVE: a snapshot without allocation history is one moment, so it cannot show "
                "growth; record history (torch.cuda.memory._record_memory_history), compare two with "
                "memleak.diff, or track the run"
            )
        return (
            "INCONCLUSIVE: no line's allocations kept surviving through the snapshot's recorded "
            "history; compare two snapshots with memleak.diff, or track the run"
        )
    g = report.growth
    verdict = report.verdict.value.upper()
    if report.leak:
        top = report.suspects[0]
        what = f"{top.kind.value} at {top.location}"
        if _graphs_weigh_more(top, g):
            # its tensors are the small part: the graphs they keep are what memory grows by
            what += (
                f", {fmt_bytes(g.slope, signed=True)} per step with the graphs its tensors keep "
                f"(the tensors themselves {fmt_bytes(top.bytes_per_step, signed=True)})"
            )
        elif top.bytes_per_step:
            what += f", {fmt_bytes(top.bytes_per_step, signed=True)} per step"
        line = f"LEAK: {what}"
        if g is not None and g.steps_to_full:
            line += (
                f"; at this rate the {'device' if g.column == 'allocated_bytes' else 'memory'} is full in "
                f"about {g.steps_to_full:,.0f} steps ({fmt_duration(g.seconds_to_full)})"
            )
        return line
    if g is None:
        return verdict
    if verdict == "CLEAN":
        return f"CLEAN: no sustained growth in {g.column} over {g.n_steps} steps after warm-up ({g.shape})"
    # growth a bounded container filling up explains (suspects._bounded_growth): say so up front
    stops = [e for s in report.suspects if s.location == g.column for e in s.evidence if e.endswith("it stops there")]
    return f"INCONCLUSIVE: {'; '.join([*g.evidence[:1], *stops[:1]]) or 'too few steps to decide'}"


#: Windows of full detail named one by one in the report (the rest are counted).
SHOWN_WINDOWS = 6


def detail_text(spans: list[tuple[int, int, str, str]], checks: list[int] | tuple = ()) -> str:
    """Which steps of an auto run had full detail, and why; the others had counters, and at the
    end of the `checks` steps the holders were walked."""
    full = [(a, b, why) for a, b, level, why in spans if level == "full"]
    walked = ""
    if checks:
        at = ", ".join(map(str, checks[:SHOWN_WINDOWS])) + (" and later" if len(checks) > SHOWN_WINDOWS else "")
        walked = f"; the holders walked at {len(checks)} check{'s' if len(checks) != 1 else ''} (steps {at})"
    if not full:
        return "counters on every step (no window of full detail)" + walked
    n = spans[-1][1] + 1
    shown = ", ".join(f"{a}-{b} ({why})" for a, b, why in full[:SHOWN_WINDOWS])
    if len(full) > SHOWN_WINDOWS:
        shown += f" and {len(full) - SHOWN_WINDOWS} more windows"
    detail = sum(b - a + 1 for a, b, _ in full)
    quiet = next((a for a, _, level, why in spans if why == "quiet"), None)
    why_short = "" if quiet is None else f" (the young steps ended at step {quiet}: nothing survived or grew in them)"
    return f"full detail on steps {shown}: {detail} of {n} steps; counters on the others{why_short}{walked}"


def _table(suspects) -> list[str]:
    rows = [("#", "kind", "location", "per step", "total", "conf")]
    for i, s in enumerate(suspects, 1):
        rows.append(
            (
                str(i),
                s.kind.value,
                s.location,
                # no rate: a snapshot's suspects, the cache's
                fmt_bytes(s.bytes_per_step, signed=True) if s.bytes_per_step else "-",
                fmt_bytes(s.total_bytes),
                f"{s.confidence:.2f}",
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    widths[2] = min(widths[2], 48)
    out = []
    for r in rows:
        loc = r[2] if len(r[2]) <= widths[2] else r[2][: widths[2] - 1] + "…"
        cells = (
            r[0].rjust(widths[0]),
            r[1].ljust(widths[1]),
            loc.ljust(widths[2]),
            r[3].rjust(widths[3]),
            r[4].rjust(widths[4]),
            r[5].rjust(widths[5]),
        )
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


def finding_lines(findings) -> list[str]:
    """The findings that name no suspect (`Finding.note`): a drop explained, a loop run without
    gradients, workers' growth within the host's memory. Each with its evidence and fix."""
    notes = [f for f in findings if f.note]
    if not notes:
        return []
    lines = ["", "findings (not leaks):"]
    for f in notes:
        lines += _wrap(f"{f.kind.value}: {f.location}", "  - ")
        for e in f.evidence:
            lines += _wrap(e, "      ")
        lines += _wrap("what to do: " + f.fix, "      ")
    return lines


def render(report) -> str:
    """The whole report as text: a header, the verdict, the ranked suspects and notes."""
    if report.ranks:
        return _render_ranks(report)
    if not hasattr(report.run, "steps"):
        return _render_snapshot(report)
    run = report.run
    meta = getattr(run, "meta", {}) or {}
    lines = [f"memleak report: {getattr(run, 'path', None) or '(in-memory run)'}"]
    steps = getattr(run, "steps", None)
    if steps is not None and len(steps):
        span = steps["time"].iloc[-1] if "time" in steps else None
        device = meta.get("device", "?")
        if meta.get("device_name"):
            device += f" ({meta['device_name']})"
        lines.append(f"  {len(steps)} steps over {fmt_duration(span)} on {device}, level {meta.get('level', '?')}")
        boundary = boundary_words(run)
        if boundary:
            lines += _wrap(boundary, "  ")
        if meta.get("level") == "auto" and hasattr(run, "detail_spans"):
            lines += _wrap(detail_text(run.detail_spans(), run.check_steps()), "  ")
    if getattr(run, "truncated", False):
        lines.append(
            "  note: the run file was cut short (the process was killed); every whole step before that was read"
        )
    lines.append("")
    lines.append("verdict: " + headline(report))
    for live in live_warning_lines(report):
        lines += _wrap(live, "  ")
    g = report.growth
    growth_is_a_suspect = any("growth" in s.detectors for s in report.suspects)
    for e in g.evidence if g is not None and not growth_is_a_suspect else ():
        lines += _wrap(e, "  - ")
    lines += suspect_lines(report.suspects, "suspects, most likely first:")
    lines += finding_lines(report.findings)
    for e in getattr(run, "events", []):
        if e.get("event") == "oom":
            lines += ["", f"out of memory at step {e.get('step')}: {e.get('message', '')}"]
        elif e.get("event") == "snapshot":
            lines += [
                "",
                f"memory snapshot written: {e.get('path')} (open it with memleak.load or pytorch.org/memory_viz)",
            ]
    for p in report.problems:
        lines += _wrap("note: " + p, "")
    return "\n".join(lines)


def _graphs_weigh_more(top, growth) -> bool:
    """A retained graph whose tensors add under half of what the memory series clearly grows per step."""
    return (
        top.kind == Kind.RETAINED_GRAPH
        and growth is not None
        and growth.slope > 0
        and growth.p_value < 0.01
        and top.bytes_per_step < 0.5 * growth.slope
    )


def _ranks_headline(report) -> str:
    leaking = [r for r, rep in report.ranks.items() if rep.leak]
    clean = [r for r, rep in report.ranks.items() if rep.verdict == Verdict.CLEAN]
    if leaking:
        top = report.suspects[0] if report.suspects else None
        line = f"LEAK on {where_ranks(leaking)}"
        if top is not None:
            where = top.location
            prefix = f"{where_ranks(leaking)}: "
            if where.startswith(prefix):  # said once is enough
                where = where[len(prefix) :]
            line += f": {top.kind.value} at {where}"
            if top.bytes_per_step:
                line += f", {fmt_bytes(top.bytes_per_step, signed=True)} per step"
        rest = [r for r in report.ranks if r not in leaking]
        if rest:
            line += f"; {where_ranks(rest)} {'does' if len(rest) == 1 else 'do'} not leak"
        return line
    if len(clean) == len(report.ranks):
        return f"CLEAN: no sustained growth on any of the {len(report.ranks)} ranks"
    undecided = [r for r in report.ranks if r not in clean]
    return f"INCONCLUSIVE on {where_ranks(undecided)}: too few steps or no clear trend to decide"


def boundary_words(run) -> str | None:
    """Which boundary ended the run's iterations, in words (None for runs written before it was recorded)."""
    events = getattr(run, "events", None) or []
    changes = [e for e in events if e.get("event") == "boundary"]
    if not changes:
        return None
    last = changes[-1]
    line = "iterations end at " + BOUNDARY_WORDS.get(str(last.get("kind")), str(last.get("kind")))
    if len(changes) > 1:
        line += f" from step {last.get('step')} on"
    skipped = sum(1 for e in events if e.get("event") == "step_skipped")
    if skipped:
        line += (
            f"; {skipped} iteration{'s' if skipped != 1 else ''} whose optimizer step was skipped (a "
            "GradScaler found inf or NaN gradients) ended when the gradients were reset"
        )
    return line


def _rank_rows(report) -> list[tuple[str, ...]]:
    """The ranks table: a header row, then one row per rank."""
    run = report.run
    rows: list[tuple[str, ...]] = [("rank", "verdict", "steps", "memory at end", "peak", "growth/step", "top suspect")]
    for rank, rep in report.ranks.items():
        col, end, peak = run.ranks[rank].memory_level()
        g = rep.growth
        slope = (
            getattr(g, "slope", None)
            if g is not None and getattr(g, "shape", "") not in (Shape.NO_DATA, Shape.TOO_SHORT)
            else None
        )
        top = rep.suspects[0] if rep.suspects else None
        rows.append(
            (
                str(rank),
                rep.verdict.value,
                str(len(run.ranks[rank])),
                fmt_bytes(end),
                fmt_bytes(peak),
                fmt_bytes(slope, signed=True),
                f"{top.kind.value} at {top.location}" if top else "-",
            )
        )
    return rows


def _render_ranks(report) -> str:
    run = report.run
    lines = [
        f"memleak report: {run.path or '(in-memory run)'} "
        f"({len(run.ranks)} rank{'s' if len(run.ranks) != 1 else ''}, world size {run.world_size})"
    ]
    meta = run.meta
    lines.append(f"  up to {len(run)} steps per rank on {meta.get('device', '?')}, level {meta.get('level', '?')}")
    if run.truncated:
        cut = [r for r, x in run.ranks.items() if x.truncated]
        lines.append(
            f"  note: the run file of {where_ranks(cut)} was cut short (the process was killed); "
            "every whole step before that was read"
        )
    lines += ["", "verdict: " + _ranks_headline(report)]
    for live in live_warning_lines(report):
        lines += _wrap(live, "  ")
    lines += ["", "ranks:"]
    rows = _rank_rows(report)
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        lines.append(
            "  "
            + "  ".join(
                cell.ljust(w) if c in (1, 6) else cell.rjust(w)
                for c, (cell, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    if report.divergences:
        lines += ["", "ranks that diverge from the others:"]
        for d in report.divergences:
            lines += _wrap(d.evidence, "  - ")
    else:
        lines += ["", "no rank diverges from the others."]
    lines += suspect_lines(report.suspects, "suspects over all ranks, most likely first:")
    lines += finding_lines(report.findings)
    for e in run.events:
        if e.get("event") == "oom":
            lines += ["", f"out of memory on rank {e['rank']} at step {e.get('step')}: {e.get('message', '')}"]
    for p in report.problems:
        lines += _wrap("note: " + p, "")
    return "\n".join(lines)


def snapshot_summary(snap) -> str:
    """A readable account of a snapshot: the cache per device and pool, the biggest live
    allocation sites, and the trace with its OOMs."""
    lines = [
        f"PyTorch memory snapshot {snap.path or '(in memory)'}: {len(snap.segments)} segments, "
        f"{len(snap.blocks)} blocks, {len(snap.trace)} trace entries"
    ]
    for r in snap.fragmentation().itertuples():
        lines.append(
            f"  cuda:{r.device} {r.pool:5s} reserved {fmt_bytes(r.reserved_bytes)}, allocated "
            f"{fmt_bytes(r.allocated_bytes)} (requested {fmt_bytes(r.requested_bytes)}), free "
            f"{fmt_bytes(r.free_bytes)}, largest free block {fmt_bytes(r.largest_free_bytes)}, "
            f"inactive split {fmt_bytes(r.inactive_split_bytes)}; fragmentation external "
            f"{r.external_fragmentation:.0%}, internal {r.internal_fragmentation:.0%}"
        )
    sites = snap.live_by_site().head(5)
    if not sites.empty:
        lines.append("  live allocations by site:")
        lines += [f"    {fmt_bytes(r.bytes):>10s} in {r.count:5d} blocks  {r.location}" for r in sites.itertuples()]
    if not snap.trace.empty:
        counts = snap.trace["action"].value_counts()
        lines.append("  trace: " + ", ".join(f"{n} {a}" for a, n in counts.items() if n))
    for oom in snap.ooms().itertuples():
        free = "?" if pd.isna(oom.device_free) else fmt_bytes(oom.device_free)
        lines.append(
            f"  OOM on cuda:{oom.device}: asked for {fmt_bytes(oom.size)} with {free} free on the "
            f"device, at {site_of(oom.frames)}"
        )
    return "\n".join(lines)


def _render_snapshot(report) -> str:
    lines = [f"memleak report: {report.run.path or '(in-memory snapshot)'}", "", "verdict: " + headline(report), ""]
    lines += snapshot_summary(report.run).split("\n")
    lines += suspect_lines(report.suspects, "suspects, most likely first:")
    for p in report.problems:
        lines += _wrap("note: " + p, "")
    return "\n".join(lines)
