"""Figures of a run: memory over steps with the growth verdict drawn in, the top holders over
steps, and the suspects.

matplotlib is imported inside each function (it is optional), and only through its
object-oriented API: a `Figure` made here belongs to no pyplot state, is never shown,
and saves to PNG without a display. The numbers come from `series.py`, which the HTML
page draws too.
"""

from __future__ import annotations

import textwrap

import numpy as np

from ..run import step_axis
from ..schema import Kind, Suspect
from ..suspects import CULPRITS, EXPLAINED_SHARE, SYMPTOMS
from ..units import fmt_bytes
from . import holder_lines as H
from . import series as S

#: Series drawn in the memory panel: these when present, else the first fallback present.
MEMORY_SERIES = ("allocated_bytes", "reserved_bytes")
FALLBACK_SERIES = ("heap_bytes", "tensor_bytes", "rss_bytes")
LABELS = S.LABELS
MAX_PROJECTION = S.MAX_PROJECTION
#: Points of a line drawn in a PNG at most (min and max per bucket, see series.downsample).
PNG_POINTS = 4000
#: The legend sits right of the data, never on it.
OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8, "frameon": False}
GROWTH_KINDS = (*SYMPTOMS, Kind.HOST_GROWTH)


def plot_run(run, growth=None, suspects=None):
    """Memory over steps (the categories and top holders stacked beneath where recorded), the
    fitted trend after the warm-up, the warm-up boundary, and (when leaking) the projection
    to the capacity; a panel for fragmentation and one for DataLoader workers' memory, where
    recorded."""
    Figure = _figure_class()
    if growth is None:
        from ..detect.growth import analyze_growth

        growth = analyze_growth(run)
    steps = run.steps
    x = step_axis(steps)
    frag = S.fragmentation_lines(steps)
    workers = S.worker_lines(steps)
    panels = 1 + bool(frag) + bool(workers)
    fig = Figure(figsize=(11, 4.5 + 2.0 * (panels - 1)), layout="constrained")
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    ax = axes[0]

    series = _memory_series(steps, growth)
    holders = H.top_holders(run, suspects or ())
    cx, layers = (
        S.categories(run, holders, _named(suspects), rest=S.rest_label(suspects)) if len(x) else (np.array([]), [])
    )
    tops = [np.nanmax(v) for _, v in series if np.isfinite(v).any()]
    tops += [float(np.sum([v for _, v in layers], axis=0).max())] if layers else []
    scale, unit = S.binary_scale(max(tops, default=1.0))
    if layers:
        colors = S.layer_colors([label for label, _ in layers], holders)
        labels = [textwrap.fill(lb, 30) for lb, _ in layers]  # a long label wraps in the legend
        ax.stackplot(cx, *[v / scale for _, v in layers], labels=labels, colors=colors, alpha=0.45)
    for label, values in series:
        dx, dy = S.downsample(x, values, PNG_POINTS)
        ax.plot(dx, dy / scale, label=label, linewidth=1.4, zorder=3)
    drawn = S.growth_lines(growth, x)
    if drawn is not None:
        _draw_growth(ax, drawn, growth, scale)
    if layers:  # the stack starts at zero: start the axis under what changes instead
        floor, top = S.stack_floor(layers, [v for _, v in series]) / scale, ax.dataLim.y1
        ax.set_ylim(floor, top + 0.05 * (top - floor))
    ax.set_ylabel(f"memory ({unit})")
    ax.ticklabel_format(axis="y", useOffset=False)  # values, not "+1.121e2" and offsets from it
    ax.set_title(_title(growth, suspects), fontsize=10, loc="left")
    ax.grid(True, alpha=0.3)
    if ax.get_lines() or layers:
        ax.legend(**OUTSIDE)

    if frag:
        _draw_fragmentation(axes[1], x, frag)
    if workers:
        _draw_workers(axes[-1], x, workers)
    axes[-1].set_xlabel("step")
    return fig


def plot_holders(run, suspects=None):
    """The top holders at each reference walk: bytes, tensors and autograd nodes, one line per
    holder. None when the run walked no holders."""
    names = H.top_holders(run, suspects or ())
    if not names:
        return None
    Figure = _figure_class()
    tables = H.holder_series(run, names)
    scale, unit = S.binary_scale(max(float(t["bytes"].max()) for t in tables.values()) or 1.0)
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    for name, t in tables.items():
        color, label = S.holder_color(names, name), _short(name) + H.note(t)
        for ax, col, div in zip(axes, ("bytes", "count", "nodes"), (scale, 1.0, 1.0), strict=True):
            ax.plot(t["step"], t[col] / div, marker=".", linewidth=1.3, color=color, label=label)
        capped = t[t["capped"] > 0]
        axes[2].plot(capped["step"], capped["nodes"], "o", markerfacecolor="white", color=color, linestyle="none")
    for ax, label in zip(axes, (f"held ({unit})", H.count_label(run, names), H.nodes_label(tables)), strict=True):
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].set_title(H.title(tables), fontsize=10, loc="left")
    axes[0].legend(**OUTSIDE)
    axes[-1].set_xlabel("step")
    return fig


def plot_suspects(suspects, findings=None):
    """Horizontal bars of total bytes per suspect location, most likely on top, labelled with
    the kind. Growth a culprit explains is no bar of its own (it is that culprit's symptom); a
    growth nobody explains is drawn grey, as a symptom. When `findings` measured growing
    autograd graphs, a second panel shows the nodes each suspect's graph adds per step: the
    evidence of a retained graph whose own tensors weigh next to nothing."""
    Figure = _figure_class()
    suspects = shown_suspects(suspects or [])
    nodes = S.graph_growth(findings)
    per_step = [nodes.get(s.location, 0.0) for s in suspects]
    two = any(per_step)
    fig = Figure(figsize=(11 if two else 9, 1.2 + 0.45 * max(len(suspects), 1)), layout="constrained")
    axes = fig.subplots(1, 2 if two else 1, sharey=True, squeeze=False, width_ratios=[3, 2] if two else [1])[0]
    ax = axes[0]
    if not suspects:
        ax.text(0.5, 0.5, "no suspects", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    totals = np.array([max(float(s.total_bytes or 0.0), 0.0) for s in suspects])
    scale, unit = S.binary_scale(totals.max() if totals.size else 1.0)
    rows = np.arange(len(suspects))[::-1]  # the first suspect on top
    bars = ax.barh(rows, totals / scale, color=[_kind_color(s) for s in suspects])
    ax.set_yticks(rows, [_short(s.location) for s in suspects], fontsize=8)
    for bar, s in zip(bars, suspects, strict=True):
        text = f" {s.kind.value}{' (symptom)' if s.kind in GROWTH_KINDS else ''}, {s.confidence:.0%}"
        ax.annotate(text, (bar.get_width(), bar.get_y() + bar.get_height() / 2), va="center", fontsize=8)
    ax.set_xlabel(f"total ({unit})")
    ax.set_title("suspects: memory each holds or adds over the run", fontsize=10, loc="left")
    ax.margins(x=0.3)
    ax.grid(True, axis="x", alpha=0.3)
    if two:
        _draw_graph_growth(axes[1], rows, per_step)
    return fig


def shown_suspects(suspects) -> list[Suspect]:
    """The suspects drawn as causes: a growth suspect (a symptom: memory grows) is left out when
    the leaking culprits explain it, by the rule `suspects.rank` folds symptoms with."""
    culprits = [s for s in suspects if s.leak and s.kind in CULPRITS]
    explained = sum(max(0.0, c.bytes_per_step) for c in culprits)
    graphs = any(c.kind == Kind.RETAINED_GRAPH for c in culprits)

    def symptom_explained(s: Suspect) -> bool:
        only_growth = s.kind in GROWTH_KINDS and set(s.detectors) <= {"growth"}
        return bool(culprits) and only_growth and (graphs or explained >= EXPLAINED_SHARE * s.bytes_per_step)

    return [s for s in suspects if not symptom_explained(s)]


def _draw_graph_growth(ax, rows, per_step) -> None:
    bars = ax.barh(rows, per_step, color="tab:purple", alpha=0.7)
    for bar, v in zip(bars, per_step, strict=True):
        if v:
            ax.annotate(
                f" +{v:,.1f}/step", (bar.get_width(), bar.get_y() + bar.get_height() / 2), va="center", fontsize=8
            )
    ax.set_xlabel("autograd nodes its graph adds per step")
    ax.set_title("retained graphs", fontsize=10, loc="left")
    ax.margins(x=0.3)
    ax.grid(True, axis="x", alpha=0.3)


def plot_ranks(report):
    """Each rank's memory over steps, leaking or diverging ranks drawn thicker."""
    Figure = _figure_class()
    run = report.run
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    cols = {run.ranks[r].memory_column() for r in report.ranks} - {None}
    col = next(iter(cols)) if len(cols) == 1 else None
    diverging = S.diverging(report.divergences)
    for rank, rep in report.ranks.items():
        c = col or run.ranks[rank].memory_column()
        if c is None:
            continue
        steps = run.ranks[rank].steps
        x, y = S.downsample(step_axis(steps), steps[c], PNG_POINTS)
        ax.plot(
            x,
            y / 2**20,
            lw=2.0 if rep.leak or rank in diverging else 1.0,
            label=f"rank {rank}: {rep.verdict.value}"
            + (f", {diverging[rank]}" if rank in diverging else "")
            + ("" if col else f" ({c})"),
        )
    ax.set_xlabel("step")
    ax.set_ylabel(f"{col or 'memory'} (MiB)")
    ax.set_title(f"memory per rank: {report.verdict.value}", fontsize=10, loc="left")
    ax.grid(True, alpha=0.3)
    if ax.get_lines():
        ax.legend(**OUTSIDE)
    return fig


def plot_snapshot(snap):
    """The caching allocator of one snapshot, per device and pool: allocated, pending free,
    free in the largest block, and free elsewhere (the fragmented part)."""
    Figure = _figure_class()
    frag = snap.fragmentation()
    fig = Figure(figsize=(9, 1.6 + 0.5 * max(len(frag), 1)), layout="constrained")
    ax = fig.subplots()
    if frag.empty:
        ax.text(0.5, 0.5, "no segments in this snapshot", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    scale, unit = _binary_scale(float(frag["reserved_bytes"].max()) or 1.0)
    rows = np.arange(len(frag))[::-1]
    parts = [
        ("allocated", frag["allocated_bytes"]),
        ("pending free", frag["pending_free_bytes"]),
        ("largest free block", frag["largest_free_bytes"]),
        ("other free pieces", frag["free_bytes"] - frag["largest_free_bytes"]),
    ]
    left = np.zeros(len(frag))
    for label, values in parts:
        v = np.asarray(values, dtype=float) / scale
        ax.barh(rows, v, left=left, label=label)
        left += v
    ax.set_yticks(rows, [f"cuda:{r.device} {r.pool}" for r in frag.itertuples()], fontsize=8)
    ax.set_xlabel(f"reserved ({unit})")
    ax.set_title("caching allocator by pool", fontsize=10, loc="left")
    ax.legend(**OUTSIDE)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


# ---------------------------------------------------------------- pieces


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # optional dependency
        raise ImportError("memleak's plots need matplotlib: pip install matplotlib") from e
    return Figure


def _memory_series(steps, growth) -> list[tuple[str, np.ndarray]]:
    """Allocated and reserved when present, else the census or RSS; always the analysed column."""
    names = [n for n in MEMORY_SERIES if S.column(steps, n) is not None]
    names = names or [n for n in FALLBACK_SERIES if S.column(steps, n) is not None][:1]
    analysed = growth.column if growth is not None else None
    if analysed and analysed not in names and S.column(steps, analysed) is not None:
        names.append(analysed)
    return [(LABELS.get(n, n), v) for n in names if (v := S.column(steps, n)) is not None]


def _draw_growth(ax, drawn: dict, growth, scale: float) -> None:
    """The Theil-Sen line over the analysed steps, thin, dashed and beneath the data; the
    warm-up boundary; the OOM projection (see series.growth_lines)."""
    fx, fy = drawn["fit"]
    trend_label = f"Theil-Sen trend ({fmt_bytes(growth.slope, signed=True)}/step)"
    style = {"color": "black", "linewidth": 1.0, "alpha": 0.6, "zorder": 2}
    ax.plot(fx, fy / scale, linestyle=(0, (5, 3)), label=trend_label, **style)
    if drawn["warmup"] is not None:
        x0 = drawn["warmup"]
        ax.axvline(x0, color="grey", linestyle=":", linewidth=1.2, label=f"end of warm-up (step {x0:.0f})")
    if drawn["ahead"] is None:
        return
    ax_, ay = drawn["ahead"]
    ax.plot(ax_, ay / scale, linestyle=(0, (1, 2)), label="projection", **style)
    oom, capacity = drawn["oom"], drawn["capacity"]
    if drawn["to_scale"]:
        ax.axhline(capacity / scale, color="red", linewidth=1.0, label=f"capacity ({fmt_bytes(capacity)})")
        ax.annotate(
            f"projected OOM at step {oom:,.0f}",
            (oom, capacity / scale),
            xytext=(-8, -14),
            textcoords="offset points",
            ha="right",
            fontsize=8,
            color="red",
        )
    else:
        ax.text(  # beside the data, under the legend
            1.02,
            0.0,
            f"projected OOM at step {oom:,.0f}\n(capacity {fmt_bytes(capacity)})",
            transform=ax.transAxes,
            ha="left",
            va="bottom",
            fontsize=8,
            color="red",
        )


def _draw_fragmentation(ax, x, series) -> None:
    scale, unit = S.binary_scale(max((np.nanmax(v) for _, v in series if np.isfinite(v).any()), default=1.0))
    for label, values in series:
        dx, dy = S.downsample(x, values, PNG_POINTS)
        ax.plot(dx, dy / scale, label=label, linewidth=1.0)
    ax.set_ylabel(f"cached, not in use ({unit})")
    ax.grid(True, alpha=0.3)
    ax.legend(**OUTSIDE)


def _draw_workers(ax, x, series) -> None:
    """DataLoader workers' memory: sampled series, each drawn through the steps that read it."""
    scale, unit = S.binary_scale(max((np.nanmax(v) for _, v in series if np.isfinite(v).any()), default=1.0))
    for label, values in series:
        keep = np.isfinite(values)
        ax.plot(x[keep], values[keep] / scale, label=label, linewidth=1.0, linestyle="-" if "RSS" in label else "--")
    ax.set_ylabel(f"DataLoader workers ({unit})")
    ax.grid(True, alpha=0.3)
    ax.legend(**OUTSIDE)


def _title(growth, suspects) -> str:
    parts = []
    if growth is not None:
        parts.append(f"{growth.column or 'memory'}: {growth.shape}{' (leak)' if growth.leak else ''}")
    if suspects:
        top = suspects[0]
        parts.append(f"top suspect: {top.kind.value} at {_short(top.location)}")
    return "; ".join(parts)


_binary_scale = S.binary_scale


def _short(text: str, width: int = 40) -> str:
    """`text` within `width` characters: its end, cut at a dot where one is near (a holder's name ends
    with what holds: ``…callbacks[Logger].buffer``, not ``…lf.callbacks[Logger].buffer``); a name
    followed by a note in parentheses keeps the name (``all_logits (local of eval_logger() in…)``)."""
    if len(text) <= width:
        return text
    name, paren, note = text.partition(" (")
    if paren and len(name) <= width - 8:  # a name with a note (a thread's local, a closure's): the name whole
        return f"{name} ({note[: width - len(name) - 4]}…)"
    tail = text[-(width - 1) :]
    dot = tail.find(".")
    return "…" + (tail[dot + 1 :] if 0 <= dot < width // 3 else tail)


def _kind_color(s: Suspect) -> str:
    if s.kind in GROWTH_KINDS:
        return "tab:gray"
    return "tab:red" if s.leak else "tab:blue"


def _named(suspects) -> tuple[str, ...]:
    return tuple(s.location for s in suspects or ())
