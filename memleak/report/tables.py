"""HTML tables and sections of the report page: the suspects with evidence and fix, memory per
module, the ranks of a distributed run, and a snapshot's pools and live allocations.

Tables with class `sortable` sort on a click of their header (html.SORT_JS); numeric cells carry
their raw number in `data-v`, so "1.5 GiB" sorts above "900 MiB".
"""

from __future__ import annotations

from html import escape

from ..schema import Shape
from ..units import fmt_bytes
from . import series

#: Live allocation sites listed at most.
MAX_SITES = 50


def section(anchor: str, title: str, *content: str) -> list[str]:
    return [f'<section id="{anchor}">', f"<h2>{escape(title)}</h2>", *content, "</section>"]


def bytes_cell(n, signed: bool = False) -> str:
    """A right-aligned cell showing bytes in binary units, sorting by the number."""
    if n is None or n != n:
        return '<td class="num">-</td>'
    return f'<td class="num" data-v="{float(n)!r}">{escape(fmt_bytes(n, signed=signed))}</td>'


def num_cell(v: float, text: str) -> str:
    return f'<td class="num" data-v="{float(v)!r}">{escape(text)}</td>'


def table(headers: list[str], rows: list[str], sortable: bool = True) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>"


def suspects_section(suspects, findings=()) -> list[str]:
    """The ranked table, then each suspect's evidence and fix, as in the text report. A column
    of the autograd nodes each suspect's graph adds per step when a detector measured one."""
    if not suspects:
        return section("suspects", "Suspects", "<p>No suspects.</p>")
    nodes = series.graph_growth(findings)
    graph = lambda s: num_cell(nodes.get(s.location, 0.0), f"+{nodes[s.location]:,.1f}" if s.location in nodes else "-")
    rows = [
        "<tr>"
        + num_cell(i, str(i))
        + f"<td>{escape(s.kind.value)}</td><td><code>{escape(s.location)}</code></td>"
        + bytes_cell(s.bytes_per_step, signed=True)
        + bytes_cell(s.total_bytes)
        + num_cell(s.confidence, f"{s.confidence:.2f}")
        + (graph(s) if nodes else "")
        + "</tr>"
        for i, s in enumerate(suspects, 1)
    ]
    details = []
    for i, s in enumerate(suspects, 1):
        evidence = "".join(f"<li>{escape(e)}</li>" for e in s.evidence)
        details.append(
            f"<details{' open' if i <= 3 else ''}><summary>{i}. {escape(s.kind.value)} at "
            f"<code>{escape(s.location)}</code> (confidence {s.confidence:.2f})</summary>"
            f'<ul>{evidence}</ul><p class="fix"><b>fix:</b> {escape(s.fix)}</p></details>'
        )
    headers = ["#", "kind", "location", "per step", "total", "confidence"] + (["graph nodes/step"] if nodes else [])
    return section("suspects", "Suspects, most likely first", table(headers, rows), *details)


def findings_section(findings) -> list[str]:
    """The findings that name no suspect (a drop explained, a loop without gradients), each
    with its evidence and fix; nothing when there are none."""
    notes = [f for f in findings if f.note]
    if not notes:
        return []
    items = []
    for f in notes:
        evidence = "".join(f"<li>{escape(e)}</li>" for e in f.evidence)
        items.append(
            f"<details open><summary>{escape(f.kind.value)}: {escape(f.location)}</summary>"
            f'<ul>{evidence}</ul><p class="fix"><b>what to do:</b> {escape(f.fix)}</p></details>'
        )
    return section("findings", "Findings (not leaks)", *items)


def modules_section(run) -> list[str]:
    """Memory per module over the detail steps, sortable; nothing when the run has no module records."""
    t = series.module_table(run)
    if t.empty:
        return []
    rows = [
        "<tr>"
        + f"<td><code>{escape(str(r[0]))}</code></td>"
        + num_cell(r[1], f"{r[1]:.3g}")
        + "".join(bytes_cell(v, signed=True) for v in r[2:4])
        + "".join(bytes_cell(v) for v in r[4:6])
        + "</tr>"
        for r in t.itertuples(index=False)
    ]
    note = (
        "<p>Means over the detail steps: the bytes each module's forward and backward allocate per step (read on "
        "every fourth detail step), what "
        "its forward leaves alive at the step's end, and outputs still alive two or more steps later. "
        "Click a header to sort.</p>"
    )
    return section("modules", "Memory per module", note, table(series.MODULE_COLUMNS, rows))


def ranks_table(report) -> str:
    """One row per rank: its verdict, steps, memory at the end, peak, growth and top suspect."""
    run = report.run
    diverging = {d.rank for d in report.divergences}
    rows = []
    for rank, rep in report.ranks.items():
        _, end, peak = run.ranks[rank].memory_level()
        g = rep.growth
        slope = g.slope if g is not None and g.shape not in (Shape.NO_DATA, Shape.TOO_SHORT) else None
        top = rep.suspects[0] if rep.suspects else None
        mark = " (diverges)" if rank in diverging else ""
        rows.append(
            "<tr>"
            + num_cell(rank, f"{rank}{mark}")
            + f"<td>{escape(rep.verdict.value)}</td>"
            + num_cell(len(run.ranks[rank]), f"{len(run.ranks[rank]):,}")
            + bytes_cell(end)
            + bytes_cell(peak)
            + bytes_cell(slope, signed=True)
            + f"<td>{escape(f'{top.kind.value} at {top.location}' if top else '-')}</td></tr>"
        )
    return table(["rank", "verdict", "steps", "memory at end", "peak", "growth/step", "top suspect"], rows)


def pools_table(snap) -> str:
    """The snapshot's cache per device and pool: reserved, allocated, free, the largest free block."""
    frag = snap.fragmentation()
    if frag.empty:
        return "<p>No segments in this snapshot.</p>"
    rows = [
        f"<tr><td>cuda:{r.device}</td><td>{escape(str(r.pool))}</td>"
        + num_cell(r.segments, str(r.segments))
        + "".join(
            bytes_cell(v)
            for v in (
                r.reserved_bytes,
                r.allocated_bytes,
                r.free_bytes,
                r.largest_free_bytes,
                r.inactive_split_bytes,
            )
        )
        + num_cell(r.external_fragmentation, f"{r.external_fragmentation:.0%}")
        + "</tr>"
        for r in frag.itertuples()
    ]
    headers = ["device", "pool", "segments", "reserved", "allocated", "free", "largest free block", "inactive split"]
    return table([*headers, "external fragmentation"], rows)


def live_table(snap) -> str:
    """Live allocations grouped by their top user frame, with the whole stack of the biggest."""
    sites = snap.live_by_site().head(MAX_SITES)
    if sites.empty:
        return "<p>No live allocations.</p>"
    rows = [
        f"<tr><td><code>{escape(str(r.location))}</code>"
        + (f"<details><summary>stack</summary><pre>{escape(str(r.stack))}</pre></details>" if r.stack else "")
        + "</td>"
        + num_cell(r.count, f"{r.count:,}")
        + bytes_cell(r.bytes)
        + bytes_cell(r.requested_bytes)
        + "</tr>"
        for r in sites.itertuples()
    ]
    return table(["where", "blocks", "bytes", "requested"], rows)
