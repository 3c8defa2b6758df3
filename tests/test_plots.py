"""The growth plot and the suspects chart: the expected pieces, no pyplot state, PNGs that save."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from memleak import analyze
from memleak.detect.growth import analyze_growth
from memleak.report.plots import plot_run, plot_suspects
from memleak.run import Run
from memleak.schema import Kind, Suspect

plt = pytest.importorskip("matplotlib.pyplot")

GIB = 1 << 30
MIB = 1 << 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def leaking_run(**extra) -> Run:
    t = np.arange(100)
    allocated = np.where(t < 3, GIB, 2 * GIB + 128 * MIB * t).astype(float)
    steps = pd.DataFrame({"step": t, "allocated_bytes": allocated, "reserved_bytes": allocated + 256 * MIB, **extra})
    return Run({"device": "cuda:0", "device_total_bytes": 40 * GIB}, steps)


def labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]


def texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


@pytest.fixture(autouse=True)
def no_pyplot_state():
    plt.close("all")
    yield
    assert plt.get_fignums() == []


def test_memory_panel_has_the_series_the_trend_the_warm_up_and_the_projection():
    run = leaking_run()
    growth = analyze_growth(run)
    assert growth.leak and growth.warmup_steps == 3
    fig = plot_run(run, growth)
    ax = fig.axes[0]
    names = labels(ax)
    assert names[:2] == ["allocated", "reserved"]
    assert any(n.startswith("Theil-Sen trend (+128.0 MiB/step)") for n in names)
    assert "projection" in names and "capacity (40.0 GiB)" in names
    warmup = [line for line in ax.get_lines() if line.get_label().startswith("end of warm-up")]
    assert len(warmup) == 1
    xs = warmup[0].get_xdata()
    assert xs[0] == xs[1] == 3  # a vertical line at the warm-up boundary
    oom = 99 + growth.steps_to_full
    assert f"projected OOM at step {oom:,.0f}" in texts(fig)
    assert ax.get_ylabel() == "memory (GiB)" and fig.axes[-1].get_xlabel() == "step"


def test_the_trend_line_spans_the_analysed_steps():
    run = leaking_run()
    growth = analyze_growth(run)
    ax = plot_run(run, growth).axes[0]
    trend = next(line for line in ax.get_lines() if line.get_label().startswith("Theil-Sen"))
    assert list(trend.get_xdata()) == [3, 99]
    assert trend.get_ydata()[0] == pytest.approx((growth.intercept + 3 * growth.slope) / GIB)


def test_a_distant_oom_is_stated_without_squashing_the_run():
    t = np.arange(100)
    run = Run({"device": "cuda:0", "device_total_bytes": 80 * GIB},
              pd.DataFrame({"step": t, "allocated_bytes": GIB + MIB * t}))
    fig = plot_run(run)
    (ax,) = fig.axes
    assert "projected OOM at step" in texts(fig)
    assert ax.get_xlim()[1] < 200  # the run stays readable
    assert not any(n.startswith("capacity") for n in labels(ax))


def test_a_clean_run_has_no_projection():
    t = np.arange(60)
    run = Run({"device": "cuda:0", "device_total_bytes": 80 * GIB},
              pd.DataFrame({"step": t, "allocated_bytes": np.full(60, GIB)}))
    (ax,) = plot_run(run).axes
    assert "projection" not in labels(ax)
    assert "projected OOM" not in texts(ax.figure)


def test_dataloader_workers_get_a_panel_of_their_own_sampled_series():
    t = np.arange(100)
    rss = 200 * MIB + MIB * t
    private = np.where(t % 4 == 0, 10 * MIB + MIB * t, np.nan)  # read on a budget: gaps between reads
    steps = pd.DataFrame({"step": t, "heap_bytes": np.full(100, 100.0 * MIB), "worker0_rss_bytes": rss,
                          "worker0_private_bytes": private, "worker1_rss_bytes": rss})
    fig = plot_run(Run({"device": "cpu"}, steps))
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "DataLoader workers (MiB)"
    assert labels(fig.axes[1]) == ["worker 0 RSS", "worker 0 private", "worker 1 RSS"]
    # a sampled series is drawn through its reads, not broken at the steps without one
    private_line = fig.axes[1].get_lines()[1]
    assert len(private_line.get_xdata()) == 25 and np.isfinite(private_line.get_ydata()).all()
    assert len(plot_run(Run({"device": "cpu"}, steps[["step", "heap_bytes"]])).axes) == 1


def test_fragmentation_gets_a_second_panel():
    run = leaking_run(inactive_split_bytes=np.linspace(0, 64 * MIB, 100))
    fig = plot_run(run, analyze_growth(run))
    assert len(fig.axes) == 2
    assert labels(fig.axes[1]) == ["inactive split", "reserved - allocated"]
    assert fig.axes[1].get_ylabel() == "cached, not in use (MiB)"


def test_without_an_allocator_the_census_is_drawn_in_its_own_unit():
    t = np.arange(40)
    run = Run({"device": "cpu"}, pd.DataFrame({"step": t, "tensor_bytes": 100 * MIB + MIB * t,
                                               "rss_bytes": 3.0 * GIB + 0 * t}))
    (ax,) = plot_run(run).axes
    assert labels(ax)[0] == "live tensors" and "process RSS" not in labels(ax)
    assert ax.get_ylabel() == "memory (MiB)"


def test_a_run_without_memory_still_plots():
    run = Run({"device": "cpu"}, pd.DataFrame({"step": range(3)}))
    assert len(plot_run(run).axes) == 1


def test_figures_save_as_png(tmp_path):
    run = leaking_run(inactive_split_bytes=np.zeros(100))
    suspects = [Suspect(Kind.CACHED_TENSOR, "encoder.layers.1.cache", MIB, 100 * MIB, 0.9, ("grows",), "detach it")]
    for name, fig in (("run.png", plot_run(run, suspects=suspects)), ("suspects.png", plot_suspects(suspects))):
        fig.savefig(tmp_path / name)
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


def test_suspects_are_bars_of_total_bytes_labelled_with_their_kind():
    suspects = [
        Suspect(Kind.RETAINED_GRAPH, "train.py:42", 2 * MIB, 3 * GIB, 0.95, ("e",), "f"),
        Suspect(Kind.FRAGMENTATION, "allocator", 0.0, 512 * MIB, 0.6, ("e",), "f", leak=False),
    ]
    fig = plot_suspects(suspects)
    (ax,) = fig.axes
    assert len(ax.patches) == 2
    widths = sorted(p.get_width() for p in ax.patches)
    assert widths == pytest.approx([0.5, 3.0])  # in GiB
    assert ax.get_xlabel() == "total (GiB)"
    ticks = {t.get_text() for t in ax.get_yticklabels()}
    assert ticks == {"train.py:42", "allocator"}
    assert "retained_graph" in texts(fig) and "fragmentation" in texts(fig)


def test_no_suspects_is_an_empty_chart():
    assert "no suspects" in texts(plot_suspects([]))


def test_importing_the_plots_does_not_import_matplotlib():
    code = "import sys, memleak.report.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- readability


def test_the_trend_is_drawn_thin_dashed_and_beneath_the_data():
    run = leaking_run()
    ax = plot_run(run, analyze_growth(run)).axes[0]
    data = next(line for line in ax.get_lines() if line.get_label() == "allocated")
    trend = next(line for line in ax.get_lines() if line.get_label().startswith("Theil-Sen"))
    assert trend.get_zorder() < data.get_zorder()
    assert trend.get_linewidth() < data.get_linewidth()
    assert trend.get_linestyle() != "-" and trend.get_alpha() < 1


def test_legends_sit_outside_the_data_area():
    run = leaking_run(inactive_split_bytes=np.linspace(0, 64 * MIB, 100))
    fig = plot_run(run, analyze_growth(run))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None
        box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= area.x1  # right of the axes: it hides no data


def _run_with_categories_and_holders(capped_from: int = 60) -> Run:
    t = np.arange(60)
    heap = 500 * MIB + 2 * MIB * t
    steps = pd.DataFrame({"step": t, "heap_bytes": heap})
    detail = range(0, 60, 6)
    modules = [{"step": s, "categories": {"parameter": 10 * MIB, "gradient": 10 * MIB, "optimizer_state": 20 * MIB,
                                          "total": float(heap[s])}} for s in detail]
    holders = [{"step": s, "holders": [{"holder": "history", "bytes": 2 * MIB * s, "count": s, "nodes": 3 * s,
                                        "capped": s >= capped_from}]}
               for s in detail]
    return Run({"device": "cpu"}, steps, records={"modules": modules, "holders": holders})


def test_categories_and_holders_are_stacked_beneath_the_line():
    run = _run_with_categories_and_holders()
    ax = plot_run(run).axes[0]
    stacked = [c.get_label() for c in ax.collections]
    assert stacked == ["activations/other", "parameters", "gradients", "optimizer state", "history"]
    assert labels(ax)[0] == "C heap"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "history" in legend and "optimizer state" in legend
    low, _ = ax.get_ylim()
    assert low > 0  # a big, constant rest is cut so that what grows stays readable


def test_holders_over_time_is_a_figure_of_bytes_tensors_and_nodes():
    from memleak.report.plots import plot_holders

    fig = plot_holders(_run_with_categories_and_holders())
    assert [ax.get_ylabel() for ax in fig.axes] == ["held (MiB)", "tensors", "autograd nodes"]
    line = fig.axes[2].get_lines()[0]
    assert line.get_label() == "history" and list(line.get_ydata()) == [3 * s for s in range(0, 60, 6)]
    assert plot_holders(leaking_run()) is None  # no reference walks, no figure
    # a holder of numpy arrays: the count axis says so
    run = _run_with_categories_and_holders()
    for rec in run.records["holders"]:
        rec["holders"][0]["np_arrays"] = rec["holders"][0]["count"]
    assert plot_holders(Run(run.meta, run.steps, records=run.records)).axes[1].get_ylabel() == "tensors and numpy arrays"


def test_a_holder_of_plain_python_data_is_drawn_with_its_bytes_and_objects():
    from memleak.report.figures import holders_figure
    from memleak.report.plots import plot_holders

    run = _run_with_categories_and_holders()
    for rec in run.records["holders"]:  # a queue of bytes: no tensor, its data's bytes and items
        h = rec["holders"][0]
        h.update(objects=h.pop("count"), obj_bytes=h.pop("bytes"), nodes=0)
    run = Run(run.meta, run.steps, records=run.records)
    fig = plot_holders(run)
    assert [ax.get_ylabel() for ax in fig.axes[:2]] == ["held (MiB)", "tensors and Python objects"]
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [2 * s for s in range(0, 60, 6)]
    assert list(fig.axes[1].get_lines()[0].get_ydata()) == list(range(0, 60, 6))
    assert "history" in [c.get_label() for c in plot_run(run).axes[0].collections]  # a layer of the picture
    assert holders_figure(analyze(run)).layout.yaxis2.title.text == "tensors and Python objects"


def test_node_counts_that_stopped_at_their_cap_are_drawn_hollow_and_labelled_lower_bounds():
    from memleak.report.figures import holders_figure
    from memleak.report.plots import plot_holders

    run = _run_with_categories_and_holders(capped_from=30)
    fig = plot_holders(run)
    assert "lower bound" in fig.axes[2].get_ylabel()
    hollow = [line for line in fig.axes[2].get_lines() if line.get_markerfacecolor() == "white"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == list(range(30, 60, 6))
    report = analyze(run)
    nodes = [t for t in holders_figure(report).data if t.yaxis == "y3"]
    assert list(nodes[0].marker.symbol) == ["circle"] * 5 + ["circle-open"] * 5
    assert "lower bound" in holders_figure(report).layout.yaxis3.title.text
    assert "lower bound" not in plot_holders(_run_with_categories_and_holders()).axes[2].get_ylabel()


def test_a_symptom_a_culprit_explains_is_no_bar_but_an_unexplained_one_is_a_grey_symptom():
    culprit = Suspect(Kind.SURVIVING_TENSORS, "history", MIB, 60 * MIB, 0.95, ("e",), "f", detectors=("culprits",))
    growth = Suspect(Kind.LINEAR_GROWTH, "heap_bytes", 1.2 * MIB, 70 * MIB, 0.9, ("e",), "f", detectors=("growth",))
    (ax,) = plot_suspects([culprit, growth]).axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["history"]
    big = Suspect(Kind.LINEAR_GROWTH, "heap_bytes", 10 * MIB, 700 * MIB, 0.9, ("e",), "f", detectors=("growth",))
    fig = plot_suspects([culprit, big])
    assert {t.get_text() for t in fig.axes[0].get_yticklabels()} == {"history", "heap_bytes"}
    assert "linear_growth (symptom)" in texts(fig)
    grey = [p for p in fig.axes[0].patches if p.get_width() > 100]
    assert len(grey) == 1 and grey[0].get_facecolor()[:3] == pytest.approx((0.5, 0.5, 0.5), abs=0.01)


def test_a_graph_only_culprit_shows_a_bar_sized_by_its_graph():
    from memleak.schema import Finding

    graph = Suspect(Kind.RETAINED_GRAPH, "total_loss['box']", 0.0, 4.0, 1.0, ("e",), "f", detectors=("graphs",))
    other = Suspect(Kind.RETAINED_GRAPH, "total_loss['cls']", 14 * 1024, 400 * 1024, 1.0, ("e",), "f")
    findings = [Finding("graphs", Kind.RETAINED_GRAPH, "total_loss['box']", 0.0, 4.0, 1.0, ("e",), "f",
                        data={"nodes_per_step": 12.0}),
                Finding("culprits", Kind.RETAINED_GRAPH, "total_loss['cls']", 0.0, 4.0, 1.0, ("e",), "f",
                        data={"steps": [1, 11], "nodes": [18, 138]})]
    fig = plot_suspects([other, graph], findings)
    assert len(fig.axes) == 2
    nodes = fig.axes[1]
    assert nodes.get_xlabel() == "autograd nodes its graph adds per step"
    assert sorted(p.get_width() for p in nodes.patches) == [12.0, 12.0]
    assert "+12.0/step" in texts(fig)


def test_a_long_holder_name_is_cut_at_a_dot_keeping_its_end():
    from memleak.report.plots import _short

    assert _short("self.callbacks[ConfusionCollector].logits") == "…callbacks[ConfusionCollector].logits"
    assert _short("short.name") == "short.name"
    assert _short("x" * 60).endswith("x" * 39) and len(_short("x" * 60)) == 40  # no dot: the plain end


def test_a_long_holder_name_with_a_note_keeps_its_name_in_the_plots_labels():
    from memleak.report.plots import _short

    label = _short("all_logits (local of eval_logger() in thread 'Thread-1 (eval_logger)')")
    assert label.startswith("all_logits (local of eval_logger()") and label.endswith("…)") and len(label) <= 40
    # a path keeps its end, where what holds is named
    assert _short("model.encoder.layers.3.attn.callbacks[Logger].buffer_of_outputs") == "…callbacks[Logger].buffer_of_outputs"
