"""The Report: verdict, text, JSON and files, on synthetic runs whose truth is known."""
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import memleak
from memleak.run import Run
from memleak.schema import Finding, Kind, Suspect
from memleak.detect.thresholds import TENSOR_HOST_OVERHEAD
from memleak.suspects import rank

MIB = 1 << 20


def synthetic_run(slope: float, steps: int = 60, base: float = 2e9, noise: float = 0.0) -> Run:
    rng = np.random.default_rng(0)
    i = np.arange(steps)
    alloc = base + slope * i + rng.normal(0, noise, steps)
    frame = pd.DataFrame({"step": i, "time": 0.1 * (i + 1), "duration": 0.1, "allocated_bytes": alloc.round(),
                          "reserved_bytes": alloc.round() + 256 * MIB, "device_total_bytes": 80 * 2**30})
    return Run({"device": "cuda:0", "device_name": "Test GPU", "level": "counters",
                "device_total_bytes": 80 * 2**30}, frame)


def test_leaking_run_reads_like_a_diagnosis():
    report = memleak.analyze(synthetic_run(4 * MIB))
    assert report.verdict == "leak" and report.leak
    text = str(report)
    assert text.splitlines()[0].startswith("memleak report")
    assert "LEAK" in text and "linear_growth" in text and "+4.0 MiB" in text
    assert "fix:" in text
    assert "steps" in text and "full in about" in text


def test_flat_run_is_clean_and_short_run_inconclusive():
    assert memleak.analyze(synthetic_run(0, noise=MIB)).verdict == "clean"
    assert memleak.analyze(synthetic_run(4 * MIB, steps=4)).verdict == "inconclusive"


def test_save_writes_text_json_and_plots(tmp_path):
    report = memleak.analyze(synthetic_run(4 * MIB))
    paths = report.save(tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == ["findings.json", "memory.png", "report.html", "report.txt", "suspects.png"]
    data = json.loads((tmp_path / "out" / "findings.json").read_text())  # strict JSON: no NaN
    assert data["verdict"] == "leak"
    assert data["suspects"][0]["kind"] == "linear_growth"
    assert (tmp_path / "out" / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "report.txt").read_text().startswith("memleak report")


def test_plot_returns_a_figure_and_leaves_no_pyplot_state():
    import matplotlib.pyplot as plt
    before = plt.get_fignums()
    fig = memleak.analyze(synthetic_run(4 * MIB)).plot()
    assert fig.axes and plt.get_fignums() == before


def _finding(kind, location, conf, leak=True, nbytes=MIB, detector="x"):
    return Finding(detector=detector, kind=kind, location=location, bytes_per_step=nbytes, total_bytes=30 * nbytes,
                   confidence=conf, evidence=(f"{detector} saw {location}",), fix=f"fix {location}", leak=leak)


def test_ranking_merges_one_cause_and_puts_culprits_above_symptoms():
    findings = [
        _finding(Kind.LINEAR_GROWTH, "allocated_bytes", 0.99, detector="growth"),
        _finding(Kind.SURVIVING_TENSORS, "history", 0.8, detector="survivors"),
        _finding(Kind.RETAINED_GRAPH, "history", 0.7, detector="graphs"),
        _finding(Kind.FRAGMENTATION, "allocator", 0.9, leak=False, detector="frag"),
    ]
    suspects = rank(findings)
    # the growth the culprit explains is its evidence, not a suspect of its own
    assert [s.location for s in suspects] == ["history", "allocator"]
    top = suspects[0]
    assert isinstance(top, Suspect)
    assert top.kind == Kind.RETAINED_GRAPH  # the more specific kind names the cause
    assert top.confidence == pytest.approx(1 - 0.2 * 0.3)
    assert set(top.detectors) == {"survivors", "graphs", "growth"}
    assert len(top.evidence) == 3
    assert top.evidence[-1] == "the symptom it explains: linear_growth of allocated_bytes (growth saw allocated_bytes)"


def test_entries_of_one_container_stored_by_one_line_are_one_suspect():
    """An EMA's shadow weights recomputed without no_grad: each entry keeps a growing graph, one
    line stores them all, and the report names one cause, not one suspect per parameter."""

    def entry(key, nbytes, line="train.py:16"):
        f = _finding(Kind.RETAINED_GRAPH, f"ema.shadow['{key}']", 0.9, nbytes=nbytes, detector="graphs")
        return replace(f, evidence=(f"ema.shadow['{key}'] is filled at {line}, the line in your code that stores into it",),
                       data={"stored": line})

    findings = [entry("0.weight", 4 * MIB), entry("0.bias", MIB), entry("2.weight", 2 * MIB),
                _finding(Kind.RETAINED_GRAPH, "other['x']", 0.8, nbytes=MIB, detector="graphs")]
    suspects = rank(findings)
    assert [s.location for s in suspects] == ["ema.shadow['0.weight']", "other['x']"]
    top = suspects[0]
    assert top.bytes_per_step == 7 * MIB and top.total_bytes == 30 * 7 * MIB
    assert "2 more entries of ema.shadow leak the same way (['2.weight'], ['0.bias'])" in top.evidence[-1]
    # stored by another line: another cause, its own suspect
    findings[1] = entry("0.bias", MIB, line="train.py:40")
    assert [s.location for s in rank(findings)] == ["ema.shadow['0.weight']", "ema.shadow['0.bias']", "other['x']"]


def test_an_attribute_of_one_name_on_several_objects_stored_by_one_line_is_one_suspect():
    """``p.grad_history.append(p.grad.clone())`` for every parameter: four holders, one line, one
    cause; an attribute of that name filled by another line stays a suspect of its own."""

    def held(location, nbytes, line="t.py:12"):
        f = _finding(Kind.SURVIVING_TENSORS, location, 0.9, nbytes=nbytes, detector="culprits")
        return replace(f, data={"stored": line})

    findings = [held("0.weight.grad_history", 8 * 1024), held("2.weight.grad_history", 1024),
                held("0.bias.grad_history", 256), held("meter.grad_history", 64, line="t.py:30")]
    suspects = rank(findings)
    assert [s.location for s in suspects] == ["0.weight.grad_history", "meter.grad_history"]
    assert suspects[0].bytes_per_step == 8 * 1024 + 1024 + 256
    assert ("2 more holders filled at t.py:12 leak the same way (2.weight.grad_history, 0.bias.grad_history)"
            in suspects[0].evidence[-1])
    # with no line known, a shared attribute name says too little to fold on
    bare = [replace(f, data={}) for f in findings[:2]]
    assert len(rank(bare)) == 2


def test_tensors_no_name_holds_made_each_step_with_a_grad_fn_are_a_retained_graph():
    """Losses kept where the walk does not reach (``atexit.register(fn, loss)``, a list a
    comprehension is building): 4 B of tensor a step, but each keeps its autograd nodes, and the
    heap grows 5 KiB a step. The survivors explain it (no "look for a second cause")."""
    f = _finding(Kind.SURVIVING_TENSORS, "train.py:7", 0.92, nbytes=4, detector="survivors")
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=5 * 1024, detector="growth")
    graphs = rank([growth, replace(f, data={"per_step": {"tensors": 1.0, "grad_fns": 1.0}})], measured_bps=5 * 1024)
    assert [(s.location, s.kind) for s in graphs] == [("train.py:7", Kind.RETAINED_GRAPH)]
    assert graphs[0].bytes_per_step == 5 * 1024
    # the same without a grad_fn: its objects explain a few hundred bytes, not the rest
    plain = rank([growth, replace(f, data={"per_step": {"tensors": 1.0, "grad_fns": 0.0}})], measured_bps=5 * 1024)
    assert [s.kind for s in plain] == [Kind.SURVIVING_TENSORS, Kind.LINEAR_GROWTH]
    assert "only 8% of this growth is explained" in plain[1].evidence[-1]


def test_a_holder_filling_to_its_bound_is_sized_by_what_it_adds_to_the_heap():
    """A lazily filled memo of small tensors (64 a step, 8 KiB of data, ~33 KiB of heap): the heap's
    rise is explained by it and no leak; its own row counts its tensors' objects too (its data alone,
    +8.0 KiB, read as a quarter of the rise it was said to explain)."""
    memo = replace(_finding(Kind.SURVIVING_TENSORS, "data.cache", 0.95, leak=False, nbytes=8192, detector="culprits"),
                   data={"filling": True, "count": [192, 8256], "steps": [1, 127]})
    rise = 8192 + 64 * TENSOR_HOST_OVERHEAD
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=rise, detector="growth")
    suspects = {s.location: s for s in rank([growth, memo])}
    assert not suspects["heap_bytes"].leak
    assert suspects["data.cache"].bytes_per_step == pytest.approx(rise)
    assert suspects["data.cache"].total_bytes == pytest.approx(30 * rise)


def test_small_tensors_of_folded_entries_explain_the_heap_they_grow():
    """A dict of per-parameter lists of 0-d grad norms: 4 B of data an entry a step, each tensor
    ~390 B of C heap. The entries folded into one cause explain the heap's growth together (each
    entry alone explains a quarter: "look for a second cause" was the report), and the evidence
    says why bytes of data and heap differ."""

    def entry(key):
        f = _finding(Kind.SURVIVING_TENSORS, f"norms['{key}']", 0.9, nbytes=4, detector="culprits")
        return replace(f, data={"stored": "t.py:9", "count": [2, 102], "steps": [1, 101]})

    keys = ("0.weight", "0.bias", "2.weight", "2.bias")
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=4 * (4 + TENSOR_HOST_OVERHEAD), detector="growth")
    suspects = rank([growth, *(entry(k) for k in keys)])
    assert [s.location for s in suspects] == ["norms['0.weight']"]
    top = suspects[0]
    assert top.bytes_per_step == pytest.approx(4 * (4 + TENSOR_HOST_OVERHEAD))
    assert any(e.startswith("its tensors are small (16 B of data a step)") for e in top.evidence), top.evidence


def test_tensors_with_a_grad_fn_piling_up_are_a_retained_graph_though_counted_nodes_stay_flat():
    """A long dict of per-sample losses: its graphs are counted at its ends only (20 nodes at every
    walk), but ever more of its tensors carry a grad_fn: the graphs grow, the heap with them."""
    f = _finding(Kind.SURVIVING_TENSORS, "miner.losses", 0.9, nbytes=64, detector="culprits")
    series = {"count": [32, 1024, 2048], "grad": [32, 1024, 2048], "nodes": [20, 20, 20], "steps": [1, 63, 127]}
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=16 * 1024, detector="growth")
    top = rank([growth, replace(f, data=series)])[0]
    assert top.location == "miner.losses" and top.kind == Kind.RETAINED_GRAPH
    no_grad = rank([growth, replace(f, data={**series, "grad": [0, 0, 0]})])
    assert no_grad[0].kind == Kind.SURVIVING_TENSORS


def test_a_second_culprit_keeping_graphs_is_a_retained_graph_of_what_the_first_leaves():
    """Features kept detached (16 KiB a step) beside a list of losses with their graphs (4 B of
    tensors, ~5.5 KiB of graph a step): the heap's growth is both; the features are the top culprit
    at their own size, the losses a retained graph of the rest (a surviving 4 B a step, before)."""
    feats = replace(_finding(Kind.SURVIVING_TENSORS, "feats", 0.95, nbytes=16 * 1024, detector="culprits"),
                    data={"count": [2, 128], "steps": [1, 127], "grad": [0, 0], "nodes": [0, 0]})
    losses = replace(_finding(Kind.SURVIVING_TENSORS, "losses", 0.95, nbytes=4, detector="culprits"),
                     data={"count": [2, 128], "steps": [1, 127], "grad": [2, 128], "nodes": [18, 172]})
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=22 * 1024, detector="growth")
    suspects = rank([growth, feats, losses], measured_bps=22 * 1024)
    assert [(s.location, s.kind) for s in suspects] == [("feats", Kind.SURVIVING_TENSORS),
                                                        ("losses", Kind.RETAINED_GRAPH)]
    assert suspects[0].bytes_per_step == pytest.approx(16 * 1024 + TENSOR_HOST_OVERHEAD)
    assert suspects[1].bytes_per_step == pytest.approx(22 * 1024 - suspects[0].bytes_per_step)


def test_growth_the_culprits_do_not_explain_stays_a_suspect():
    findings = [_finding(Kind.LINEAR_GROWTH, "allocated_bytes", 0.99, nbytes=10 * MIB, detector="growth"),
                _finding(Kind.SURVIVING_TENSORS, "history", 0.9, nbytes=MIB, detector="survivors")]
    suspects = rank(findings)
    assert [s.location for s in suspects] == ["history", "allocated_bytes"]
    assert "only 10% of this growth is explained by history" in suspects[1].evidence[-1]
    # the growth's fix no longer says that no holder grows: history does
    findings[0] = replace(findings[0], fix="memleak looked with full detail on 40 steps and found no holder that grows without bound.")
    assert "found no holder besides history that grows" in rank(findings)[1].fix
    # a culprit that adds most of the growth explains it
    findings[1] = _finding(Kind.SURVIVING_TENSORS, "history", 0.9, nbytes=6 * MIB, detector="survivors")
    assert [s.location for s in rank(findings)] == ["history"]


def test_a_culprit_whose_graphs_grow_explains_heap_growth_beyond_its_tensor_bytes():
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=12 * MIB, detector="growth")
    held = Finding(detector="culprits", kind=Kind.SURVIVING_TENSORS, location="history", bytes_per_step=2 * MIB,
                   total_bytes=60 * MIB, confidence=0.9, evidence=("kept",), fix="detach", data={"nodes": [10, 200, 400]})
    (top,) = rank([growth, held])
    assert top.location == "history" and top.bytes_per_step == 12 * MIB  # the growth it explains is its own
    # its tensors are a sixth of the growth: the graphs they keep are the mechanism
    assert top.kind == Kind.RETAINED_GRAPH and "the autograd graphs they keep" in top.evidence[-1]
    flat = Finding(**{**held.__dict__, "data": {"nodes": [0, 0, 0]}})
    assert [s.location for s in rank([growth, flat])] == ["history", "heap_bytes"]


def test_scalars_with_growing_graphs_are_a_retained_graph_when_memory_grows_below_the_leak_line():
    # a list of scalar losses: 4 B of tensors a step, while the heap grows 8 KiB a step (too little
    # to be a leak finding of its own); the measured slope still says the graphs hold the bytes
    held = Finding(detector="culprits", kind=Kind.SURVIVING_TENSORS, location="losses", bytes_per_step=4,
                   total_bytes=120, confidence=0.9, evidence=("kept",), fix="item()", data={"nodes": [26, 120, 246]})
    (top,) = rank([held], measured_bps=8 * 1024)
    assert top.kind == Kind.RETAINED_GRAPH and "the autograd graphs they keep" in top.evidence[-1]
    assert top.bytes_per_step == 4  # no growth finding folded in: its own bytes stay
    # big tensors that are most of the growth, or no measured growth: surviving tensors
    assert rank([held], measured_bps=6)[0].kind == Kind.SURVIVING_TENSORS
    assert rank([held])[0].kind == Kind.SURVIVING_TENSORS
    flat = Finding(**{**held.__dict__, "data": {"nodes": [26, 26, 26]}})
    assert rank([flat], measured_bps=8 * 1024)[0].kind == Kind.SURVIVING_TENSORS


def test_one_fresh_tensor_whose_size_rose_is_a_leak_only_when_it_rose_every_time_and_memory_with_it():
    # `logits` is rebound every step to a tensor of a random length: the sampled sizes happened to
    # rise, but memory did not; a size that rose at every one of 5 samples (a tensor concatenated
    # onto itself) with memory rising as much is a leak
    held = Finding(detector="culprits", kind=Kind.SURVIVING_TENSORS, location="logits", bytes_per_step=2048,
                   total_bytes=64 * 1024, confidence=0.86, evidence=("grows",), fix="detach",
                   data={"bytes_only": True, "nodes": [0] * 5, "bytes": [10, 20, 30, 40, 50]})
    (quiet,) = rank([held], measured_bps=100)
    assert not quiet.leak and "only its size varies" in quiet.evidence[-1]
    (rising,) = rank([held], measured_bps=2000)
    assert rising.leak
    # memory rising (a short run's warm-up) does not make sizes that merely vary, or 4 samples, a leak
    varied = Finding(**{**held.__dict__, "data": {**held.data, "bytes": [10, 40, 20, 30, 50]}})
    assert not rank([varied], measured_bps=2000)[0].leak
    four = Finding(**{**held.__dict__, "data": {**held.data, "bytes": [10, 20, 30, 40]}})
    assert not rank([four], measured_bps=2000)[0].leak
    more = Finding(**{**held.__dict__, "data": {"bytes_only": False}})
    assert rank([more], measured_bps=100)[0].leak  # more tensors held, or old ones: no confirmation needed
    # a cache that held nothing at the first samples, then a larger tensor at every one (a prompt
    # cache reused without a copy): judged from its first tensor on
    late = Finding(**{**held.__dict__, "data": {**held.data, "bytes": [0, 0, 10, 20, 30, 40, 50]}})
    assert rank([late], measured_bps=2000)[0].leak
    short = Finding(**{**held.__dict__, "data": {**held.data, "bytes": [0, 0, 0, 10, 20, 30, 40]}})
    assert not rank([short], measured_bps=2000)[0].leak  # four samples with a tensor: too few


def test_a_growing_holder_in_host_memory_on_a_device_run_is_confirmed_by_the_host_series():
    # `all_logits = np.append(all_logits, out)` on a GPU run: one fresh numpy array a step, in host
    # memory, growing at every sample; the device's allocator stays flat (an H200 run called it clean)
    held = Finding(detector="culprits", kind=Kind.SURVIVING_TENSORS, location="all_logits", bytes_per_step=65536,
                   total_bytes=2 << 20, confidence=0.95, evidence=("grows",), fix="keep numbers",
                   data={"bytes_only": True, "host": True, "bytes": [1, 2, 3, 4, 5, 6]})
    assert rank([held], measured_bps=0.0, host_bps=66000)[0].leak
    assert not rank([held], measured_bps=0.0, host_bps=100)[0].leak  # host memory flat: sizes that vary
    on_device = Finding(**{**held.__dict__, "data": {**held.data, "host": False}})
    assert not rank([on_device], measured_bps=0.0, host_bps=66000)[0].leak  # the device's own series decides


def test_a_retained_graph_headline_says_what_its_graphs_grow_memory_by_beyond_its_tensors():
    from dataclasses import replace

    from memleak.report.text import headline

    report = memleak.analyze(synthetic_run(27 * 1024, base=1e8, noise=1024))
    graph = Suspect(Kind.RETAINED_GRAPH, "history", 4.0, 116.0, 0.95, ("e",), "f", detectors=("culprits",))
    line = headline(replace(report, suspects=[graph]))
    assert line.startswith("LEAK: retained_graph at history, +27.0 KiB per step with the graphs its tensors keep")
    assert "(the tensors themselves +4 B)" in line
    # tensors that are most of the growth, another kind, or no clear trend: the suspect's own rate alone
    for s, rep in ((replace(graph, bytes_per_step=20 * 1024), report),
                   (replace(graph, kind=Kind.SURVIVING_TENSORS), report),
                   (graph, replace(report, growth=replace(report.growth, p_value=0.2)))):
        assert "with the graphs its tensors keep" not in headline(replace(rep, suspects=[s]))


def test_a_container_gaining_tensors_ranks_above_one_tensor_made_from_it_as_sure():
    """`neg = torch.stack(bank.entries)` each step: the stacked copy grows in bytes alone (one tensor,
    new each step, its first rows carried over) as surely as the bank gains tensors; the bank, what
    to fix, comes first, also where it is a little less sure. Where the lone tensor is surer by
    more than that margin, it leads."""
    sizes = {"bytes": [16 * 1024 * k for k in range(1, 8)], "bytes_only": True, "ends": ["a:b"] * 7}
    neg = replace(_finding(Kind.SURVIVING_TENSORS, "neg", 0.95, nbytes=16 * 1024, detector="culprits"), data=sizes)
    neg = replace(neg, total_bytes=10 * MIB)  # its copy is larger than what the bank's estimate says
    bank = _finding(Kind.SURVIVING_TENSORS, "bank.entries", 0.95, nbytes=16 * 1024, detector="culprits")
    growth = _finding(Kind.LINEAR_GROWTH, "heap_bytes", 0.9, nbytes=32 * 1024, detector="growth")
    assert [s.location for s in rank([growth, neg, bank], measured_bps=32 * 1024)] == ["bank.entries", "neg"]
    # the survivor checks' samples rate the bank a little less sure (level auto): still first
    assert rank([growth, neg, replace(bank, confidence=0.91)], measured_bps=32 * 1024)[0].location == "bank.entries"
    assert rank([growth, neg, replace(bank, confidence=0.8)], measured_bps=32 * 1024)[0].location == "neg"
