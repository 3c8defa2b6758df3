"""The report as one self-contained HTML page: the verdict, the ranked suspects with their
evidence and fix, and interactive figures (plotly, `figures.py`) of memory by category, the top
holders, per-module memory, fragmentation, the ranks of a distributed run and a snapshot's cache.

plotly.js is inlined once per page (about 4.6 MB), so the file opens offline; the figures'
series are downsampled (`series.downsample`), so a long run still makes a small, quick page.
"""

from __future__ import annotations

import uuid
from html import escape

from ..units import fmt_duration
from . import figures, series, tables
from .live_note import live_warning_lines
from .tables import section
from .text import detail_text, headline

CSS = """
.memleak-report{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;max-width:1200px;margin:auto;
 padding:0 12px;line-height:1.45}
.memleak-report h1{font-size:1.5em;margin:.6em 0 .2em}.memleak-report h2{font-size:1.2em;margin:1.4em 0 .4em;
 border-bottom:1px solid #ddd}
.memleak-report .meta{color:#555;margin:0}
.memleak-report .verdict{padding:.6em 1em;border-radius:6px;font-size:1.05em}
.memleak-report .verdict.leak{background:#fde8e8;border-left:6px solid #d62728}
.memleak-report .verdict.clean{background:#e8f6e8;border-left:6px solid #2ca02c}
.memleak-report .verdict.inconclusive{background:#fff6e0;border-left:6px solid #e0a000}
.memleak-report table{border-collapse:collapse;font-size:.9em;margin:.4em 0}
.memleak-report th,.memleak-report td{border-bottom:1px solid #e4e4e4;padding:3px 10px;text-align:left;
 vertical-align:top}
.memleak-report td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.memleak-report table.sortable th{cursor:pointer;user-select:none;background:#f4f4f4}
.memleak-report table.sortable th:after{content:" \\2195";color:#aaa}
.memleak-report details{margin:.3em 0 .8em}.memleak-report summary{cursor:pointer;font-weight:600}
.memleak-report .fix{background:#eef5ff;padding:.3em .6em;border-radius:4px}
.memleak-report code,.memleak-report pre{font-size:.9em}
.memleak-report pre{white-space:pre-wrap;margin:0}
"""

#: Sorts a table.sortable by the clicked column: cells' data-v when numeric, else their text.
SORT_JS = """
(function(root){if(!root)return;root.querySelectorAll("table.sortable").forEach(function(t){
 t.querySelectorAll("th").forEach(function(th,i){th.addEventListener("click",function(){
  var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows),dir=th.dataset.dir==="desc"?1:-1;
  th.dataset.dir=dir>0?"asc":"desc";
  function key(r){var c=r.cells[i];return c.dataset.v!==undefined?parseFloat(c.dataset.v):c.textContent;}
  rows.sort(function(a,b){var x=key(a),y=key(b);
   return dir*(typeof x==="number"&&typeof y==="number"?x-y:String(x).localeCompare(String(y)));});
  rows.forEach(function(r){body.appendChild(r);});});});});
})(document.getElementById("%s"));
"""


def render_html(report, include_plotlyjs: bool = True, full_html: bool = True) -> str:
    """The page: `full_html` wraps it in <html> with a title; `include_plotlyjs` inlines
    plotly.js (leave it out only where the page it goes into has it already)."""
    root = f"memleak-{uuid.uuid4().hex[:12]}"
    parts = [f'<div class="memleak-report" id="{root}">', f"<style>{CSS}</style>"]
    if include_plotlyjs:
        parts.append(plotly_script())
    parts += _header(report) + _verdict(report) + tables.suspects_section(report.suspects, report.findings)
    parts += tables.findings_section(report.findings)
    if report.ranks:
        parts += _ranks(report)
    elif hasattr(report.run, "steps"):
        parts += _run_sections(report)
    else:
        parts += _snapshot(report.run)
    parts += _notes(report)
    parts += [f"<script>{SORT_JS % root}</script>", "</div>"]
    body = "\n".join(parts)
    if not full_html:
        return body
    title = escape(f"memleak report: {getattr(report.run, 'path', None) or '(in memory)'}")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def plotly_script() -> str:
    """plotly.js inlined, for a page that opens without a network."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as e:
        raise ImportError("memleak's HTML report needs plotly: pip install plotly") from e
    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def figure_html(fig) -> str:
    """One figure as a div and the script that draws it (plotly.js comes from the page)."""
    import plotly.io as pio

    height = fig.layout.height or 420
    config = {"displaylogo": False, "responsive": True}
    return pio.to_html(
        fig, include_plotlyjs=False, full_html=False, config=config, default_height=f"{height}px", validate=False
    )


def _header(report) -> list[str]:
    run = report.run
    lines = [f"<h1>memleak report: {escape(str(getattr(run, 'path', None) or '(in memory)'))}</h1>"]
    steps = getattr(run, "steps", None)
    meta = getattr(run, "meta", {}) or {}
    if steps is not None and len(steps) and not report.ranks:
        span = steps["time"].iloc[-1] if "time" in steps else None
        device = str(meta.get("device", "?")) + (f" ({meta['device_name']})" if meta.get("device_name") else "")
        text = f"{len(steps):,} steps over {fmt_duration(span)} on {device}, level {meta.get('level', '?')}"
        lines.append(f'<p class="meta">{escape(text)}</p>')
        if meta.get("level") == "auto" and hasattr(run, "detail_spans"):
            lines.append(f'<p class="meta">{escape(detail_text(run.detail_spans(), run.check_steps()))}</p>')
    elif report.ranks:
        text = f"{len(report.ranks)} ranks of world size {getattr(run, 'world_size', '?')} on {run.device}"
        lines.append(f'<p class="meta">{escape(text)}</p>')
    if getattr(run, "truncated", False):
        lines.append(
            '<p class="meta">The run file was cut short (the process was killed); every whole step was read.</p>'
        )
    return lines


def _verdict(report) -> list[str]:
    g = report.growth
    live = live_warning_lines(report)
    items = []
    if g is not None and not any("growth" in s.detectors for s in report.suspects):
        items = [f"<li>{escape(e)}</li>" for e in g.evidence]
    return section(
        "verdict",
        "Verdict",
        f'<p class="verdict {report.verdict.value}">{escape(headline(report))}</p>',
        "".join(f'<p class="live-warning">{escape(line)}</p>' for line in live),
        f"<ul>{''.join(items)}</ul>" if items else "",
    )


def _run_sections(report) -> list[str]:
    run = report.run
    out = []
    if series.memory_lines(run) or series.categories(run, [])[1]:
        note = (
            "<p>Stacked: memory by category and the top holders at the steps the module probe and the reference "
            "walk sampled; lines: the counters at every step (downsampled to about "
            f"{series.MAX_POINTS:,} points per series, keeping each bucket's minimum and maximum).</p>"
        )
        out += section("memory", "Memory over steps", note, figure_html(figures.memory_figure(report)))
    fig = figures.holders_figure(report)
    if fig is not None:
        out += section("holders", "Top holders over steps", figure_html(fig))
    out += tables.modules_section(run)
    fig = figures.fragmentation_figure(report)
    if fig is not None:
        out += section("fragmentation", "Fragmentation", figure_html(fig))
    fig = figures.workers_figure(report)
    if fig is not None:
        out += section("workers", "DataLoader workers", figure_html(fig))
    return out


def _ranks(report) -> list[str]:
    out = section("ranks", "Ranks", figure_html(figures.ranks_figure(report)), tables.ranks_table(report))
    items = [
        f"<li><b>rank {d.rank}</b> ({escape(d.kind.value)}): {escape(d.evidence)}</li>" for d in report.divergences
    ]
    out += section(
        "divergences",
        "Ranks that diverge",
        f"<ul>{''.join(items)}</ul>" if items else "<p>No rank diverges from the others.</p>",
    )
    return out


def _snapshot(snap) -> list[str]:
    out = section("pools", "Caching allocator by pool", tables.pools_table(snap))
    fig = figures.segments_figure(snap)
    if fig is not None:
        out += section("segments", "Segments and their largest free block", figure_html(fig))
    out += section("live", "Live allocations by stack", tables.live_table(snap))
    return out


def _notes(report) -> list[str]:
    items = []
    for e in getattr(report.run, "events", []):
        if e.get("event") == "oom":
            where = f"rank {e['rank']} " if "rank" in e else ""
            items.append(f"out of memory on {where}at step {e.get('step')}: {e.get('message', '')}")
        elif e.get("event") == "snapshot":
            items.append(f"memory snapshot written: {e.get('path')} (open it with memleak.load)")
    items += [str(p) for p in report.problems]
    if not items:
        return []
    return section("notes", "Notes", "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>")
