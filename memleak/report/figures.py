"""Interactive figures of a report for the HTML page, made with plotly (imported when used).

Each function returns a `plotly.graph_objects.Figure`, or None when the run has nothing for
it. Series longer than `series.MAX_POINTS` are downsampled (`series.downsample`: min and max
per bucket), so a run of a million steps draws as fast as one of a thousand.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..run import step_axis
from ..units import fmt_bytes
from . import holder_lines as H
from . import series as S

LINE_COLORS = {"allocated": "#1f3b73", "reserved": "#7f7f7f", "device total": "#d62728", "C heap": "#1f3b73"}


def go() -> Any:
    try:
        import plotly.graph_objects as graph_objects
    except ImportError as e:  # optional at import time, required for the page
        raise ImportError("memleak's HTML report needs plotly: pip install plotly") from e
    return graph_objects


def _layout(title: str, unit: str, height: int = 420) -> dict:
    return {
        "title": {"text": title, "x": 0.01, "font": {"size": 14}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
        "xaxis": {"title": {"text": "step"}},
        "yaxis": {"title": {"text": f"memory ({unit})"}, "rangemode": "tozero"},
        "hovermode": "x unified",
        "legend": {"orientation": "v", "x": 1.02, "y": 1, "xanchor": "left"},
        "template": "plotly_white",
    }


def memory_figure(report) -> Any:
    """Memory over steps: the categories and top holders stacked (where recorded), the
    allocator or host counters as lines, the trend after the warm-up and the OOM projection."""
    run = report.run
    x = step_axis(run.steps)
    lines = S.memory_lines(run)
    holders = H.top_holders(run, report.suspects)
    cx, layers = S.categories(
        run, holders, tuple(s.location for s in report.suspects), rest=S.rest_label(report.suspects)
    )
    tops = [np.nanmax(v) for _, v in lines] + ([np.sum([v for _, v in layers], axis=0).max()] if layers else [])
    scale, unit = S.binary_scale(max(tops, default=1.0))
    g = go()
    fig = g.Figure(layout=_layout(_title(report), unit))
    fig.update_layout(legend_groupclick="toggleitem")  # a click hides one layer, not the whole stack
    for (label, v), color in zip(layers, S.layer_colors([lb for lb, _ in layers], holders), strict=True):
        fig.add_trace(
            g.Scatter(
                x=cx,
                y=v / scale,
                name=label,
                stackgroup="categories",
                mode="lines",
                line={"width": 0.5, "color": color},
                legendgroup="stacked",
                legendgrouptitle={"text": "at detail steps"},
                hovertemplate=f"%{{y:.4g}} {unit}",
            )
        )
    for label, v in lines:
        dx, dy = S.downsample(x, v)
        fig.add_trace(
            g.Scatter(
                x=dx,
                y=dy / scale,
                name=label,
                mode="lines",
                line={"width": 1.5, "color": LINE_COLORS.get(label)},
                hovertemplate=f"%{{y:.4g}} {unit}",
            )
        )
    drawn = S.growth_lines(report.growth, x)
    _add_growth(fig, g, drawn, scale)
    if layers:  # the stack starts at zero: start the axis under what changes instead
        floor = S.stack_floor(layers, [v for _, v in lines])
        fig.update_yaxes(range=[floor / scale, _top(layers, lines, drawn) / scale])
    else:
        fig.update_yaxes(rangemode="normal")
    return fig


def _top(layers, lines, drawn) -> float:
    """The top of the memory axis: the stack, the lines and the projection, with a margin."""
    tops = [float(np.sum([v for _, v in layers], axis=0).max())]
    tops += [float(np.nanmax(v)) for _, v in lines]
    if drawn is not None and drawn["ahead"] is not None:
        tops.append(float(drawn["ahead"][1].max()))
        if drawn["to_scale"]:
            tops.append(float(drawn["capacity"]))
    return max(tops) * 1.03


def _add_growth(fig, g, drawn: dict | None, scale: float) -> None:
    """The trend (dashed, translucent), the end of the warm-up, the projection and the OOM."""
    if drawn is None:
        return
    fx, fy = drawn["fit"]
    style = {"color": "black", "width": 1, "dash": "dash"}
    fig.add_trace(g.Scatter(x=fx, y=fy / scale, name="trend after warm-up", mode="lines", line=style, opacity=0.7))
    if drawn["warmup"] is not None:
        fig.add_vline(x=drawn["warmup"], line={"color": "grey", "dash": "dot", "width": 1})
        fig.add_annotation(
            x=drawn["warmup"], y=1, yref="paper", text="end of warm-up", showarrow=False, xanchor="left", yanchor="top"
        )
    if drawn["ahead"] is None:
        return
    ax_, ay = drawn["ahead"]
    fig.add_trace(
        g.Scatter(x=ax_, y=ay / scale, name="projection", mode="lines", line={**style, "dash": "dot"}, opacity=0.7)
    )
    text = f"projected OOM at step {drawn['oom']:,.0f}<br>(capacity {fmt_bytes(drawn['capacity'])})"
    red = {"color": "#d62728"}
    if drawn["to_scale"]:
        fig.add_hline(y=drawn["capacity"] / scale, line={**red, "width": 1})
        fig.add_annotation(x=drawn["oom"], y=drawn["capacity"] / scale, text=text, font=red)
    else:  # beside the data, under the legend
        fig.add_annotation(
            x=1.02,
            y=0,
            xref="paper",
            yref="paper",
            text=text,
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font=red,
        )


def _title(report) -> str:
    g = report.growth
    if g is None:
        return "memory over steps"
    return f"{g.column or 'memory'}: {g.shape}{' (leak)' if g.leak else ''}"


def holders_figure(report) -> Any:
    """Each top holder's bytes, tensor count and autograd nodes at each reference walk."""
    names = H.top_holders(report.run, report.suspects)
    if not names:
        return None
    from plotly.subplots import make_subplots

    tables = H.holder_series(report.run, names)
    scale, unit = S.binary_scale(max(t["bytes"].max() for t in tables.values()) or 1.0)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06)
    g = go()
    for name, t in tables.items():
        color = S.holder_color(names, name)
        for row, (col, div) in enumerate((("bytes", scale), ("count", 1.0), ("nodes", 1.0)), 1):
            fig.add_trace(
                g.Scatter(
                    x=t["step"],
                    y=t[col] / div,
                    name=name + H.note(t),
                    legendgroup=name,
                    showlegend=row == 1,
                    mode="lines+markers",
                    marker=_holder_marker(t, col),
                    line={"color": color, "width": 1.5},
                ),
                row=row,
                col=1,
            )
    fig.update_layout(_layout(H.title(tables), unit, height=560))
    labels = (f"bytes ({unit})", H.count_label(report.run, names), H.nodes_label(tables).replace("\n", "<br>"))
    for row, label in enumerate(labels, 1):
        fig.update_yaxes(title_text=label, rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="step", row=3, col=1)
    return fig


def _holder_marker(table, column: str) -> dict[str, Any]:
    """Hollow markers on node counts that stopped at their cap (lower bounds)."""
    if column != "nodes":
        return {"size": 4}
    return {"size": 5, "symbol": ["circle-open" if c else "circle" for c in table["capped"]]}


def fragmentation_figure(report) -> Any:
    """Cached but unused memory (reserved - allocated, inactive split bytes) and, on a second
    axis, the allocator's cumulative retries and OOMs."""
    steps = report.run.steps
    lines = S.fragmentation_lines(steps)
    counts = [(n, v) for n in ("num_alloc_retries", "num_ooms") if (v := S.column(steps, n)) is not None and v.any()]
    if not lines and not counts:
        return None
    from plotly.subplots import make_subplots

    x = step_axis(steps)
    scale, unit = S.binary_scale(max((np.nanmax(v) for _, v in lines), default=1.0))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    g = go()
    for label, v in lines:
        dx, dy = S.downsample(x, v)
        fig.add_trace(g.Scatter(x=dx, y=dy / scale, name=label, mode="lines"), secondary_y=False)
    for name, v in counts:
        dx, dy = S.downsample(x, v)
        fig.add_trace(g.Scatter(x=dx, y=dy, name=name, mode="lines", line={"dash": "dot"}), secondary_y=True)
    fig.update_layout(_layout("cached, not in use", unit, height=340))
    fig.update_yaxes(title_text="count", secondary_y=True, rangemode="tozero")
    return fig


def workers_figure(report) -> Any:
    """DataLoader workers' RSS and private memory, each sampled series drawn through its reads."""
    lines = S.worker_lines(report.run.steps)
    if not lines:
        return None
    x, g = step_axis(report.run.steps), go()
    scale, unit = S.binary_scale(max((np.nanmax(v) for _, v in lines), default=1.0))
    fig = g.Figure(layout=_layout("DataLoader workers", unit, height=340))
    for label, v in lines:
        keep = np.isfinite(v)
        dash = None if "RSS" in label else "dash"
        fig.add_trace(g.Scatter(x=x[keep], y=v[keep] / scale, name=label, mode="lines", line={"dash": dash}))
    return fig


def ranks_figure(report) -> Any:
    """One line per rank; a rank that diverges is drawn thicker and named in the legend."""
    run, g = report.run, go()
    diverging = S.diverging(report.divergences)
    peaks = [run.ranks[r].memory_level()[2] or 0.0 for r in report.ranks]
    scale, unit = S.binary_scale(max(peaks, default=1.0) or 1.0)
    fig = g.Figure(layout=_layout(f"memory per rank: {report.verdict.value}", unit))
    for rank, rep in report.ranks.items():
        col = run.ranks[rank].memory_column()
        if col is None:
            continue
        x, y = S.downsample(step_axis(run.ranks[rank].steps), run.ranks[rank].steps[col])
        name = f"rank {rank}: {rep.verdict.value}" + (f", {diverging[rank]}" if rank in diverging else "")
        wide = rank in diverging or rep.leak
        fig.add_trace(g.Scatter(x=x, y=y / scale, name=name, mode="lines", line={"width": 3 if wide else 1.2}))
    return fig


def segments_figure(snap, limit: int = 80) -> Any:
    """A snapshot's segments (the largest `limit`), each a bar of allocated, pending free,
    its largest free block and the other free pieces."""
    b = snap.blocks
    if b.empty:
        return None
    state = b["state"].astype(object)
    parts = b.assign(
        allocated=b["size"].where(state == "active_allocated", 0),
        pending=b["size"].where(state == "active_pending_free", 0),
        free=b["size"].where(state == "inactive", 0),
    )
    seg = parts.groupby(["device", "segment_address"]).agg(
        allocated=("allocated", "sum"), pending=("pending", "sum"), free=("free", "sum"), largest=("free", "max")
    )
    seg = seg.assign(total=seg.sum(axis=1) - seg["largest"]).nlargest(limit, "total").iloc[::-1]
    scale, unit = S.binary_scale(float(seg["total"].max()) or 1.0)
    labels = [f"cuda:{d} {a:#x}" for d, a in seg.index]
    g = go()
    fig = g.Figure(layout=_layout(f"segments (largest {len(seg)})", unit, height=160 + 18 * len(seg)))
    for name, values in (
        ("allocated", seg["allocated"]),
        ("pending free", seg["pending"]),
        ("largest free block", seg["largest"]),
        ("other free pieces", seg["free"] - seg["largest"]),
    ):
        fig.add_trace(g.Bar(y=labels, x=values / scale, name=name, orientation="h"))
    fig.update_layout(barmode="stack", xaxis_title_text=f"bytes ({unit})", yaxis_title_text="", hovermode="closest")
    return fig
