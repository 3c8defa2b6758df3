"""The HTML report: one self-contained page with the verdict, the suspects, memory by category,
the top holders, per-module memory, fragmentation, ranks and snapshots; small and quick to
build for a million steps; written by report.save, the CLI and shown in notebooks."""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memleak
from memleak.cli import main as cli_main
from memleak.io import RunWriter
from memleak.report.series import MAX_POINTS, categories, downsample, memory_lines, module_table
from memleak.run import Run
from memleak.snapshot import Snapshot
from tests import snapshot_factory as sf

pytest.importorskip("plotly")

MIB = 1 << 20
GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "example_run"


class Page(HTMLParser):
    """What a browser would see: sections, tables, scripts and external references."""

    VOID = {"meta", "br", "img", "link", "input", "hr", "col", "source", "wbr"}

    def __init__(self, text: str):
        super().__init__()
        self.sections: list[str] = []
        self.scripts: list[dict] = []
        self.external: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.open: list[str] = []
        self.mismatched: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id"))
        if tag == "script":
            self.scripts.append(a)
        for key in ("src", "href"):
            if re.match(r"\s*(https?:)?//", a.get(key) or ""):
                self.external.append(a[key])
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.tables and self.tables[-1]:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        if self.open and self.open[-1] == tag:
            self.open.pop()
        else:
            self.mismatched.append(tag)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def without_plotlyjs(text: str) -> str:
    """The page less the inlined plotly.js bundle (whose source names URLs it never loads)."""
    return re.sub(r'<script type="text/javascript">/\*\*\s*\* plotly\.js.*?</script>', "", text, flags=re.S)


def leaking_run(n: int = 120, detail_every: int = 10) -> Run:
    """An accelerator run whose `history` grows 1 MiB per step, with categories and holders recorded."""
    i = np.arange(n)
    alloc = GIB + MIB * i + np.random.default_rng(0).normal(0, 64 * 1024, n)
    steps = pd.DataFrame({
        "step": i, "time": 0.1 * (i + 1), "allocated_bytes": alloc, "reserved_bytes": alloc + 256 * MIB,
        "device_total_bytes": 40 * GIB, "inactive_split_bytes": np.linspace(0, 64 * MIB, n),
        "num_alloc_retries": (i // 40).astype(float),
    })
    detail = range(0, n, detail_every)
    modules = [{"step": s, "steps": detail_every, "counter": "allocated",
                "categories": {"parameter": 200 * MIB, "gradient": 200 * MIB, "optimizer_state": 400 * MIB,
                               "total": float(alloc[s])},
                "modules": [["<root>", detail_every, 30 * MIB, 20 * MIB, MIB],
                            ["encoder", detail_every, 20 * MIB, 12 * MIB, 0],
                            ["encoder.cache_layer", 2 * detail_every, 8 * MIB, 0, MIB]],
                "alive": [["encoder.cache_layer", 1, 3, 3 * MIB]]} for s in detail]
    holders = [{"step": s, "holders": [{"holder": "history", "kind": "local", "bytes": MIB * s, "count": s,
                                        "nodes": 10 * s},
                                       {"holder": "batch", "kind": "local", "bytes": 4 * MIB, "count": 2,
                                        "nodes": 0}]} for s in detail]
    meta = {"device": "cuda:0", "device_name": "Test GPU", "level": "full", "device_total_bytes": 40 * GIB}
    return Run(meta, steps, records={"modules": modules, "holders": holders}, path="runs/synthetic")


@pytest.fixture(scope="module")
def leaking_report():
    report = memleak.analyze(leaking_run())
    assert report.leak
    return report


@pytest.fixture(scope="module")
def page(leaking_report) -> str:
    return leaking_report.to_html()


# ---------------------------------------------------------------- the page


def test_the_page_is_one_well_formed_offline_document(page):
    parsed = Page(page)
    assert page.startswith("<!DOCTYPE html>") and "<title>memleak report: runs/synthetic</title>" in page
    assert not parsed.mismatched and not parsed.open  # every tag closed in order
    assert parsed.external == []  # no script, stylesheet or image from the network
    assert all("src" not in s for s in parsed.scripts)  # every script inline
    bundles = page.count("* plotly.js v")
    assert bundles == 1  # plotly.js inlined once, not once per figure
    assert page.count("Plotly.newPlot(") >= 3


def test_the_page_has_every_section_of_a_run(page):
    assert Page(page).sections == ["verdict", "suspects", "memory", "holders", "modules", "fragmentation"]


def test_dataloader_workers_get_a_section_where_recorded():
    run = leaking_run()
    t = np.arange(len(run.steps))
    run.steps["worker0_rss_bytes"] = 200.0 * MIB + MIB * t
    run.steps["worker0_private_bytes"] = np.where(t % 4 == 0, 10.0 * MIB + MIB * t, np.nan)
    assert Page(memleak.analyze(run).to_html()).sections[-1] == "workers"


def test_the_verdict_and_suspects_read_as_in_the_text_report(leaking_report, page):
    from memleak.report.text import headline

    top = leaking_report.suspects[0]
    body = without_plotlyjs(page)
    assert 'class="verdict leak"' in body
    assert escape(headline(leaking_report)) in body
    assert escape(top.fix) in body
    assert all(escape(e) in body for e in top.evidence)
    table = Page(page).tables[0]
    assert table[0] == ["#", "kind", "location", "per step", "total", "confidence", "graph nodes/step"]
    assert [row[2] for row in table[1:]] == [s.location for s in leaking_report.suspects]
    history = next(row for row in table[1:] if row[2] == "history")
    assert history[6] == "+10.0"  # its graph: 10 autograd nodes more at each step


def escape(text: str) -> str:
    from html import escape as html_escape

    return html_escape(text)


def test_holders_and_categories_are_in_the_memory_figures(page):
    body = without_plotlyjs(page)
    for name in ("history", "parameters", "gradients", "optimizer state", "activations\\u002fother"):
        assert f'"name":"{name}"' in body, name
    assert body.count('"stackgroup":"categories"') == 5  # the rest, 3 categories, history (batch is <1%)
    for line in ("allocated", "reserved", "device total", "trend after warm-up", "projection"):
        assert f'"name":"{line}"' in body, line
    # the holders figure: bytes, tensors and autograd nodes of history and batch
    assert body.count('"legendgroup":"history"') == 3 and body.count('"legendgroup":"batch"') == 3
    assert "autograd nodes" in body


def test_the_module_table_has_one_sortable_row_per_module(leaking_report, page):
    table = next(t for t in Page(page).tables if t and t[0][0] == "module")
    expected = module_table(leaking_report.run)
    assert [row[0] for row in table[1:]] == list(expected["module"]) == ["<root>", "encoder", "encoder.cache_layer"]
    assert table[1][2] == "+30.0 MiB" and table[3][1] == "2"  # forward of <root>; calls/step of the cache layer
    assert table[3][5] == "3.0 MiB"  # outputs kept two or more steps
    assert '<table class="sortable">' in page and "function key(r)" in page


def test_a_cpu_run_draws_the_host_counters_and_the_holders_of_the_example_run():
    report = memleak.analyze(memleak.load(EXAMPLE))
    body = without_plotlyjs(report.to_html())
    assert '"name":"C heap"' in body
    assert '"name":"encoder.1.cache"' in body  # the example run's culprit, as a holder over steps
    assert "holders" in Page(body).sections


def test_a_run_with_only_counters_has_no_empty_sections():
    i = np.arange(80)
    run = Run({"device": "cpu"}, pd.DataFrame({"step": i, "heap_bytes": 1e8 + 0 * i}))
    sections = Page(memleak.analyze(run).to_html()).sections
    assert sections == ["verdict", "suspects", "memory"]


def test_a_distributed_run_has_one_line_per_rank_and_names_the_rank_that_diverges(tmp_path):
    for r in range(3):
        w = RunWriter(tmp_path / f"run-rank{r}-of3.jsonl")
        w.header({"device": f"cuda:{r}", "rank": r, "world_size": 3, "level": "counters",
                  "device_total_bytes": 80 * GIB})
        for i in range(150):
            w.step({"step": i, "time": 0.1 * (i + 1), "allocated_bytes": GIB + (4 * MIB * i if r == 2 else 0) + i % 7})
        w.close()
    report = memleak.analyze(memleak.load(tmp_path))
    page = report.to_html()
    parsed = Page(page)
    assert parsed.sections[:4] == ["verdict", "suspects", "ranks", "divergences"]
    body = without_plotlyjs(page)
    for r in range(3):
        assert f'"name":"rank {r}: ' in body
    assert '"name":"rank 2: leak, leaks_alone, holds_more"' in body
    ranks = next(t for t in parsed.tables if t[0][0] == "rank")
    assert [row[0] for row in ranks[1:]] == ["0", "1", "2 (diverges)"]
    assert "<b>rank 2</b> (leaks_alone)" in body and "<b>rank 2</b> (holds_more)" in body
    assert "<b>rank 0</b>" not in body and "<b>rank 1</b>" not in body


def test_a_snapshot_shows_its_pools_segments_and_live_allocations_by_stack():
    report = memleak.analyze(Snapshot.from_data(sf.fragmented()))
    page = report.to_html()
    parsed = Page(page)
    assert parsed.sections[:2] == ["verdict", "suspects"]
    assert {"pools", "segments", "live"} <= set(parsed.sections)
    pools = next(t for t in parsed.tables if "largest free block" in t[0])
    assert pools[1][:2] == ["cuda:0", "large"] and pools[1][pools[0].index("largest free block")] == "256.0 MiB"
    live = next(t for t in parsed.tables if t[0][0] == "where")
    assert [row[0].split("stack")[0] for row in live[1:]] == ["train.py:10:forward", "model.py:42:attend"]
    assert "/home/u/train.py" in page  # the whole stack, under a <details>
    assert '"name":"largest free block"' in without_plotlyjs(page)


# ---------------------------------------------------------------- long runs


def test_downsampling_keeps_each_buckets_min_and_max_and_the_ends():
    rng = np.random.default_rng(1)
    y = rng.normal(0, 1, 1_000_000)
    y[123_457], y[876_543] = 50.0, -50.0  # one-step spikes
    x = np.arange(len(y), dtype=float)
    dx, dy = downsample(x, y)
    assert len(dy) <= MAX_POINTS + 2
    assert dy.max() == 50.0 and dy.min() == -50.0
    assert 123_457 in dx and 876_543 in dx
    assert dx[0] == 0 and dx[-1] == len(y) - 1 and (np.diff(dx) > 0).all()  # in step order
    buckets = np.array_split(y, MAX_POINTS // 2)  # every bucket's extremes survive
    assert set(np.round([b.max() for b in buckets], 12)) <= set(np.round(dy, 12))


def test_downsampling_leaves_short_series_and_drops_missing_samples():
    x, y = np.arange(5.0), np.array([1.0, np.nan, 3.0, np.nan, 5.0])
    dx, dy = downsample(x, y)
    assert list(dx) == [0, 2, 4] and list(dy) == [1, 3, 5]


def test_a_million_steps_make_a_small_page():
    n = 1_000_000
    i = np.arange(n)
    alloc = 2e9 + 1000.0 * i + np.random.default_rng(0).normal(0, 1e6, n)
    alloc[500_001] += 5e9  # a spike the page must still show
    steps = pd.DataFrame({"step": i, "time": 0.1 * (i + 1), "allocated_bytes": alloc,
                          "reserved_bytes": alloc + 3e8, "inactive_split_bytes": alloc % 1e8})
    holders = [{"step": s, "holders": [{"holder": "history", "bytes": 1000 * s, "count": s // 100, "nodes": 0}]}
               for s in range(0, n, 5000)]
    run = Run({"device": "cuda:0", "device_total_bytes": 80 * GIB}, steps, records={"holders": holders})
    report = memleak.analyze(run)
    memleak.analyze(Run({"device": "cpu"}, steps.head(50))).to_html()  # plotly imported and warm
    page = report.to_html()  # its build time is measured in benchmarks/html_report.py, not here
    assert len(page) < 10e6, f"{len(page) / 1e6:.1f} MB"
    x, y = trace(page, "allocated")
    assert 500_001 in x and y.max() == pytest.approx(alloc.max() / GIB)  # the spike is among the points drawn
    assert len(x) <= MAX_POINTS + 2


def trace(page: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The x and y a figure of the page draws for the trace `name` (plotly writes typed arrays in base64)."""
    m = re.search(r'"name":"%s"[^{}]*?"x":(\{[^}]*\}),"y":(\{[^}]*\})' % re.escape(name), page)
    assert m, f"no trace {name!r}"

    def array(text: str) -> np.ndarray:
        d = json.loads(text)
        return np.frombuffer(base64.b64decode(d["bdata"]), dtype=d["dtype"]).astype(float)

    return array(m.group(1)), array(m.group(2))


# ---------------------------------------------------------------- files, CLI, notebooks


def test_save_writes_the_page_beside_the_text(tmp_path, leaking_report):
    paths = leaking_report.save(tmp_path / "out")
    page = tmp_path / "out" / "report.html"
    assert page in paths and "holders.png" in {p.name for p in paths}
    assert Page(page.read_text()).sections[:3] == ["verdict", "suspects", "memory"]


def test_the_cli_writes_the_page_and_opens_it(tmp_path, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url))
    out = tmp_path / "pages" / "example.html"
    assert cli_main(["report", str(EXAMPLE), "--html", str(out)]) == 0
    assert out.is_file() and "encoder.1.cache" in out.read_text()
    assert f"HTML report written to {out}" in capsys.readouterr().out
    assert opened == []
    assert cli_main(["report", str(EXAMPLE), "--html", str(out), "--open"]) == 0
    assert opened == [out.resolve().as_uri()]
    assert cli_main(["report", str(EXAMPLE), "-o", str(tmp_path / "saved"), "--open"]) == 0
    assert opened[-1] == (tmp_path / "saved" / "report.html").resolve().as_uri()


def test_the_cli_refuses_a_folder_for_the_page(tmp_path, capsys):
    assert cli_main(["report", str(EXAMPLE), "--html", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_notebook_shows_the_same_content_without_a_whole_document(leaking_report, page):
    cell = leaking_report._repr_html_()
    assert not cell.lstrip().startswith("<!DOCTYPE") and "<html" not in cell
    assert cell.count("* plotly.js v") == 1  # works offline, in a notebook saved and opened later too
    assert Page(cell).sections == Page(page).sections
    assert without_plotlyjs(cell).count("Plotly.newPlot(") == without_plotlyjs(page).count("Plotly.newPlot(")


def test_categories_stack_the_rest_first_and_the_holders_on_top():
    x, layers = categories(leaking_run(), ["history", "batch"])
    labels = [label for label, _ in layers]
    assert labels == ["activations/other", "parameters", "gradients", "optimizer state", "history"]
    total = np.sum([v for _, v in layers], axis=0)
    assert total == pytest.approx(leaking_run().steps["allocated_bytes"].to_numpy()[x.astype(int)])


def test_where_a_suspect_keeps_graphs_the_rest_layer_says_it_has_what_they_saved():
    """A walk counts a held graph's nodes, not the tensors they saved for backward: those are in the
    rest layer, and its label says whose graphs they are; it keeps the rest's colour and its place."""
    import types

    from memleak.report.series import CATEGORY_COLORS, REST, layer_colors, rest_label, stack_floor
    from memleak.schema import Kind

    cached = types.SimpleNamespace(kind=Kind.CACHED_TENSOR, location="cache")
    graphs = types.SimpleNamespace(kind=Kind.RETAINED_GRAPH, location="preds")
    assert rest_label([cached]) == REST
    label = rest_label([cached, graphs])
    # one line: the HTML legend shows it as it is (the PNG's legend wraps it)
    assert label.startswith(REST) and "preds" in label and "saved" in label and "\n" not in label
    profiler = types.SimpleNamespace(kind=Kind.PROFILER, location="torch.profiler", leak=True)
    assert "torch.profiler" in rest_label([profiler]) and rest_label([profiler]).startswith(REST)
    x, layers = categories(leaking_run(), ["history"], rest=label)
    assert layers[0][0] == label
    assert layer_colors([label, "history"], ["history"])[0] == CATEGORY_COLORS[REST]
    flat = [(label, np.full(4, 100.0)), ("history", np.arange(4.0))]
    assert stack_floor(flat, []) > 0  # the axis starts under a big constant rest, whatever its label


def test_a_family_of_holders_is_drawn_once_not_also_as_its_first_members():
    """Walks before a family of holders made one per step was big enough to fold saw its members
    by name: the pictures draw the family (`heads.task*.weight`), not those few members too."""
    from memleak.report.holder_lines import top_holders

    i = np.arange(20)
    steps = pd.DataFrame({"step": i, "time": 0.1 * (i + 1), "heap_bytes": 1e8 + 4096.0 * i})
    early = [{"step": s, "holders": [{"holder": f"heads.task{k}.weight", "kind": "attribute", "bytes": 4096,
                                      "count": 1} for k in range(s)]} for s in (1, 3, 5)]
    late = [{"step": s, "holders": [{"holder": "heads.task*.weight", "kind": "attribute", "bytes": 4096 * s,
                                     "count": s}, {"holder": "cache", "kind": "global", "bytes": 100, "count": 1}]}
            for s in (9, 15, 19)]
    run = Run({"device": "cpu", "level": "auto"}, steps, records={"holders": early + late})
    assert top_holders(run) == ["heads.task*.weight", "cache"]


def _heap_run(n, module_steps, *, own_from=None, arena_less=0.0, walked=(), level="auto"):
    """A CPU run of `n` steps whose heap grows 64 KiB a step from 100 MiB, plus memleak's own bytes
    (1 MiB, then 30 MiB from step `own_from`; none without it); `modules` records at `module_steps`,
    their counter `arena_less` under the heap; a walk at each step of `walked` where `history` holds
    64 KiB a step."""
    i = np.arange(n)
    own = np.zeros(n) if own_from is None else np.where(i >= own_from, 30 * MIB, MIB).astype(float)
    heap = 100 * MIB + 64 * 1024 * i + own
    columns = {"step": i, "time": 0.1 * (i + 1), "heap_bytes": heap.astype(float)}
    if own_from is not None:
        columns["memleak_bytes"] = own
    modules = [{"step": s, "steps": 1, "counter": "heap", "modules": [], "alive": [],
                "categories": {"parameter": 10 * MIB, "total": float(heap[s] - arena_less)}} for s in module_steps]
    holders = [{"step": s, "holders": [{"holder": "history", "kind": "local", "bytes": 64 * 1024 * s,
                                        "count": s, "nodes": 0}]} for s in walked]
    records = {"modules": modules, "holders": holders}
    return Run({"device": "cpu", "level": level}, pd.DataFrame(columns), records=records, path="runs/cpu")


def test_a_cpu_run_is_drawn_less_memleaks_own_heap_bytes():
    """memleak's bookkeeping (the detector it imports mid-run: 30 MiB at once) is not the user's
    memory: the heap line and the stack's top are drawn less it, as the detectors judge them."""
    run = _heap_run(60, range(0, 60, 10), own_from=20, level="full")
    (label, line), = memory_lines(run)
    assert label == "C heap" and line == pytest.approx(100 * MIB + 64 * 1024 * np.arange(60))
    x, layers = categories(run, [])
    top = np.sum([v for _, v in layers], axis=0)
    assert top == pytest.approx(100 * MIB + 64 * 1024 * x)


def test_the_stack_runs_on_to_the_walks_after_the_last_detail_step():
    """Level auto walks the holders at checks between its windows, and once more at the end: the
    stack goes on to those walks, the categories as last recorded and the total as the memory
    column moved since then (the records' counter, glibc's arena alone, is lower than the heap)."""
    walked = (1, 3, 5, 60, 99)
    run = _heap_run(100, (1, 3, 5), arena_less=30 * MIB, walked=walked)
    x, layers = categories(run, ["history"], keep=("history",))
    assert x.tolist() == list(walked)
    stack = dict(layers)
    assert stack["parameters"].tolist() == [10 * MIB] * len(walked)
    assert stack["history"].tolist() == [64 * 1024 * s for s in walked]
    top = np.sum([v for _, v in layers], axis=0)
    assert top == pytest.approx(100 * MIB + 64 * 1024 * x - 30 * MIB)


def test_the_stack_after_the_last_detail_step_takes_memleaks_own_bytes_off_once():
    """A detector imported mid-run (memleak's own 30 MiB on the heap) between the last detail step
    and the later walks: the stack's top follows the heap less memleak's bytes, taken off once."""
    run = _heap_run(100, (1, 3, 5), own_from=40, walked=(1, 3, 5, 60, 99))
    x, layers = categories(run, ["history"], keep=("history",))
    top = np.sum([v for _, v in layers], axis=0)
    assert top == pytest.approx(100 * MIB + 64 * 1024 * x)


def test_the_stack_leaves_out_the_detail_steps_tracemalloc_traced():
    """A window's detail steps read while tracemalloc traced (their host reads emptied): the records'
    counter there carries tracemalloc's tables, and the stack jumped above the heap line."""
    run = _heap_run(60, (1, 3, 5, 40, 42, 44), level="auto")
    traced = (42, 43, 44)
    run.steps.loc[run.steps["step"].isin(traced), "heap_bytes"] = np.nan
    for r in run.module_records:
        if r.step in traced:
            r.categories["total"] += 12 * MIB
    x, layers = categories(run, [])
    assert x.tolist() == [1, 3, 5, 40]
    top = np.sum([v for _, v in layers], axis=0)
    assert top == pytest.approx(100 * MIB + 64 * 1024 * x)


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to check the page's scripts")
def test_the_pages_own_scripts_are_valid_javascript(tmp_path, page):
    scripts = re.findall(r"<script>(.*?)</script>", without_plotlyjs(page), flags=re.S)
    assert scripts
    for n, code in enumerate(scripts):
        path = tmp_path / f"s{n}.js"
        path.write_text(code)
        subprocess.run(["node", "--check", str(path)], check=True)


def test_plotly_is_imported_only_when_a_page_is_made():
    code = ("import sys, memleak, memleak.report.html, memleak.report.figures; "
            "r = memleak.analyze(memleak.load(sys.argv[1])); str(r); print('plotly' in sys.modules); "
            "r.to_html(); print('plotly' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLE)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.split() == ["False", "True"]
