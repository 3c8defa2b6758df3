"""Holders of plain Python data (``out.tolist()`` kept every step, per-sample result dicts): the walk
sizes them, the culprits detector names one that grows with host memory, a per-step float log stays
clean, and the generic growth fix does not ask a run that had full detail to run with it."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import torch

import memleak
from memleak.detect import culprits
from memleak.detect.growth import detect as growth_detect
from memleak.probes.pydata import data_size, item_size
from memleak.records import HolderRow, HoldersRecord
from memleak.run import Run
from tests.helpers import model_and_optimizer

KIB = 1024
MIB = 1 << 20
META = {"device": "cpu", "level": "full", "host_memory_bytes": 16 << 30}


# ---------------------------------------------------------------- sizing (probes/pydata.py)


def test_data_size_estimates_nested_lists_of_floats():
    rows = [[float(i + j) / 7 for j in range(10)] for i in range(512)]
    n, nbytes = data_size(rows)
    exact = sys.getsizeof(rows) + sum(sys.getsizeof(r) + sum(sys.getsizeof(x) for x in r) for r in rows)
    assert n == 512 and 0.8 * exact <= nbytes <= 1.2 * exact


def test_data_size_skips_containers_with_tensors_and_bounds_its_work():
    assert data_size([1.5, torch.zeros(2)]) is None
    assert data_size({"a": [object()]}) is None
    deep = [[[[[[0.5] * 50] * 50] * 50] * 50] * 50]
    assert item_size(deep) is None  # more objects than one item may take: left to the walk
    assert data_size({"loss": 0.5, "lr": 1e-3})[0] == 2


def test_walk_records_python_objects_under_their_holder(tmp_path):
    model, opt = model_and_optimizer()
    preds, feats = [], []
    with memleak.track(model, optimizer=opt, out=str(tmp_path / "run"), level="full") as tracker:
        for _ in range(6):
            x = torch.randn(256, 64)
            out = model(x)
            out.sum().backward()
            opt.step()
            opt.zero_grad()
            preds.append(out.detach().softmax(-1).tolist())
            feats.append(out.detach().clone())
    last = {r.holder: r for r in tracker.run().holders[-1].holders}
    assert last["preds"].count == 0 and last["preds"].objects >= 5 and last["preds"].obj_bytes > 64 * KIB
    assert last["feats"].count >= 5 and not last["feats"].obj_bytes  # tensors counted as before


def test_a_dict_of_named_lists_of_plain_data_names_the_list_that_grows():
    """A logger's history of plain data: the key that grows is the holder, not the whole dict."""
    model, opt = model_and_optimizer()
    history = {"loss": [], "lr": [], "text": [], "epoch": 0}
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(6):
            out = model(torch.randn(64, 64))
            out.sum().backward()
            opt.step()
            opt.zero_grad()
            history["loss"].append(float(out.mean()))
            history["lr"].append(0.01)
            history["text"].append(repr(out.detach().tolist()))
    last = {r.holder: r for r in tracker.run().holders[-1].holders}
    assert "history" not in last, sorted(last)
    assert last["history['text']"].objects >= 5 and last["history['text']"].obj_bytes > 32 * KIB


# ---------------------------------------------------------------- the detector (detect/object_holders.py)


def _run(data_bps: float, rss_bps: float, steps: int = 60, hkind: str = "global", sampled: int | None = None) -> Run:
    rng = np.random.default_rng(0)
    x = np.arange(steps)
    frame = pd.DataFrame(
        {
            "step": x,
            "heap_bytes": 200 * MIB + rng.uniform(-8, 8, steps) * KIB,
            "rss_bytes": 400 * MIB + rss_bps * x + rng.uniform(-4, 4, steps) * KIB,
        }
    )
    holders = [
        HoldersRecord(
            step=s,
            holders=(
                HolderRow("preds", hkind, objects=s + 1, obj_bytes=int(data_bps * (s + 1)), stored="train.py:12"),
                HolderRow("batch", "local", count=2, bytes=64 * KIB),
            ),
            nodes_walked=100,
        ).to_dict()
        for s in range(1, sampled or steps, 2)
    ]
    return Run(dict(META), frame, records={"holders": holders})


def _at(findings, loc):
    return next((f for f in findings if f.location == loc and f.leak), None)


def test_growing_python_list_that_explains_rss_is_named_with_a_fix():
    run = _run(data_bps=90 * KIB, rss_bps=110 * KIB)  # 1.6 % of RSS: under the 2 % RSS needs alone
    assert not growth_detect(run)
    f = _at(culprits.detect(run), "preds")
    assert f is not None and f.kind.value == "python_objects"
    assert f.bytes_per_step > 80 * KIB
    text = " ".join(f.evidence)
    assert "holds 60 Python objects" in text and "rss_bytes" in text and "this holder backs it" in text
    assert "deque(maxlen" in f.fix and "running metric" in f.fix and "disk" in f.fix
    report = memleak.analyze(run)
    assert report.verdict.value == "leak" and report.suspects[0].location == "preds"
    assert report.growth.column == "rss_bytes"  # the verdict quotes the series that shows it
    assert report.suspects[0].kind.value == "python_objects" and "python_objects at preds" in str(report)


def test_findings_saved_before_the_python_objects_kind_still_load():
    from memleak.schema import Kind, finding_from_dict

    old = {"detector": "culprits", "kind": "surviving_tensors", "location": "preds", "bytes_per_step": 1.0}
    old.update(total_bytes=1.0, confidence=0.6, evidence=["holds 60 Python objects"], fix="keep less")
    new = dict(old, kind="python_objects")
    assert finding_from_dict(old).kind is Kind.SURVIVING_TENSORS
    assert finding_from_dict(new).kind is Kind.PYTHON_OBJECTS


def test_a_holder_sampled_only_while_young_is_confirmed_by_the_rss_it_grows_with_not_the_heap():
    # level auto: walks on steps 1-31, counters after; Python objects show in RSS, the heap stays flat
    run = _run(data_bps=90 * KIB, rss_bps=110 * KIB, steps=80, sampled=32)
    report = memleak.analyze(run)
    assert report.verdict.value == "leak" and report.suspects[0].location == "preds"
    assert not any("not shown to leak" in e for e in report.suspects[0].evidence)


def test_a_float_logged_each_step_is_no_leak():
    # `losses.append(loss.item())`, a small dict of floats a step: a few hundred bytes a step
    run = _run(data_bps=400, rss_bps=110 * KIB)
    assert _at(culprits.detect(run), "preds") is None
    assert memleak.analyze(run).verdict.value != "leak"


def test_holder_that_explains_little_of_the_host_growth_is_not_named():
    run = _run(data_bps=8 * KIB, rss_bps=400 * KIB)
    assert _at(culprits.detect(run), "preds") is None


def test_fast_growing_holder_is_named_when_host_memory_reuses_freed_memory():
    assert _at(culprits.detect(_run(data_bps=90 * KIB, rss_bps=0)), "preds") is not None
    assert _at(culprits.detect(_run(data_bps=20 * KIB, rss_bps=0)), "preds") is None


# ---------------------------------------------------------------- the generic fix (detect/growth.py)


def _linear(level: str, events=None) -> Run:
    y = 100 * MIB + np.arange(60) * 256 * KIB
    frame = pd.DataFrame({"step": np.arange(60), "allocated_bytes": y})
    return Run({"device": "cuda:0", "device_total_bytes": 80 << 30, "level": level}, frame, events=events)


def test_leak_fix_asks_for_full_detail_only_where_the_run_had_none():
    (f,) = growth_detect(_linear("counters"))
    assert 'level="full"' in f.fix
    (f,) = growth_detect(_linear("full"))
    assert 'level="full"' not in f.fix and "full detail on 60 steps" in f.fix and "tracemalloc" in f.fix
    assert "found no holder that grows without bound" in f.fix  # a bounded one it named is no answer
    assert "a local variable of a function another thread runs" in " ".join(f.fix.split())
    events = [
        {"event": "detail", "step": 0, "level": "full", "reason": "start"},
        {"event": "detail", "step": 32, "level": "counters", "reason": "window_end"},
    ]
    (f,) = growth_detect(_linear("auto", events))
    assert 'level="full"' not in f.fix and "full detail on 32 steps" in f.fix


def test_records_of_plain_attributes_are_sized_with_their_attributes():
    # a MemoryHandler's LogRecords, a dataclass row: an object, its __dict__ and its values (Tribler #8530)
    import dataclasses
    import logging

    @dataclasses.dataclass(slots=True)
    class Row:
        step: int
        loss: float
        tag: str

    rec = logging.LogRecord("serve", logging.INFO, "/srv/app.py", 12, "request %s took %.3f", ("r-1", 0.25), None)
    size = item_size(rec)
    assert size is not None and size >= sys.getsizeof(rec) + sys.getsizeof(rec.__dict__) + sys.getsizeof(rec.msg)
    row = Row(1000, 0.5, "train")
    assert item_size(row) == sys.getsizeof(row) + sys.getsizeof(1000) + sys.getsizeof(0.5) + sys.getsizeof("train")
    n, nbytes = data_size([rec] * 40)
    assert n == 40 and nbytes >= 40 * size


def test_objects_that_keep_more_than_plain_attributes_are_left_to_the_walk():
    class Holder:
        def __init__(self):
            self.t = torch.zeros(4)

    def fn():
        return 1

    for obj in (Holder(), fn, lambda: 0, ValueError("x"), torch.zeros(2), torch.nn.Linear(2, 2), torch.nn.Parameter(torch.zeros(2))):
        assert item_size(obj) is None, obj
    assert data_size([Holder()]) is None
    from collections import OrderedDict, namedtuple

    Step = namedtuple("Step", "step loss")  # its items live in the tuple, not in attributes
    assert item_size(Step(1, torch.zeros(2))) is None
    assert item_size(OrderedDict(t=torch.zeros(2))) is None
    if torch.distributed.is_available():  # a pybind11 object keeps its state in C++ (a Work, the tensor it reduces)
        assert item_size(torch._C._distributed_c10d.Work()) is None
