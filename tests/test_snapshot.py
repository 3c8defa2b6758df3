"""memleak.snapshot: reading every snapshot layout safely, fragmentation, diff, findings."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapshot_factory as sf
from memleak.errors import RunFileError
from memleak.schema import Kind
from memleak.io import diff, load_snapshot
import memleak
from memleak.detect.snapshot import detect_snapshot
from memleak.snapshot import Snapshot
from snapshot_factory import GiB, MiB

BASE = 0x7F0000000000


@pytest.fixture
def frag_file(tmp_path):
    return sf.write(tmp_path / "frag.pickle", sf.fragmented())


# ---------------------------------------------------------------- layouts

def test_current_layout_tables(frag_file):
    s = load_snapshot(frag_file)
    assert s.path == str(frag_file)
    assert list(s.segments["total_size"]) == [1 * GiB, 256 * MiB, 2 * MiB]
    assert list(s.segments["segment_type"]) == ["large", "large", "small"]
    assert list(s.segments["n_blocks"]) == [41, 1, 2]
    assert s.segments["segment_pool_id"].iloc[0] == (0, 0)
    first = s.segments.iloc[0]
    assert first["allocated_size"] == 20 * 20 * MiB + 224 * MiB
    b = s.blocks[s.blocks["segment_address"] == BASE]
    assert list(b["address"][:3]) == [BASE, BASE + 20 * MiB, BASE + 40 * MiB]
    assert b["frames"].iloc[0] == "model.py:42:attend"      # the user frame, not the torch or C++ ones
    assert b["frames"].iloc[2] == "train.py:10:forward"
    assert pd.isna(b["frames"].iloc[1])                     # a free block has no stack
    assert b["stack"].iloc[0].splitlines()[2] == "/home/u/model.py:42:attend"
    assert len(b["stack"].iloc[0].splitlines()) == 4


def test_three_layouts_agree(tmp_path):
    current = sf.fragmented()
    frames = {}
    for name, obj in {"current": current, "pre21": sf.pre21(current), "list": sf.segment_list(current)}.items():
        s = load_snapshot(sf.write(tmp_path / f"{name}.pkl", obj))
        frames[name] = s
    a, old, lst = (frames[k] for k in ("current", "pre21", "list"))
    pd.testing.assert_frame_equal(a.fragmentation(), old.fragmentation())
    cols = ["address", "size", "state", "frames"]
    pd.testing.assert_frame_equal(a.blocks[cols], old.blocks[cols])
    # torch 1.x blocks have no requested size: the block size stands in for it, as in torch's _memory_viz
    f = lst.fragmentation()
    assert (f["requested_bytes"] == f["allocated_bytes"]).all()
    pd.testing.assert_series_equal(f["free_bytes"], a.fragmentation()["free_bytes"])
    assert list(lst.blocks["address"]) == list(a.blocks["address"])
    assert lst.trace.empty and list(lst.trace.columns) == list(a.trace.columns)


def test_trace_table(tmp_path):
    site = sf.stack(line=7)
    traces = [[sf.trace_entry("segment_alloc", BASE, 20 * MiB, site, time_us=1),
               sf.trace_entry("alloc", BASE, 4 * MiB, site, time_us=2),
               sf.trace_entry("free_requested", BASE, 4 * MiB, site, time_us=3),
               sf.trace_entry("free_completed", BASE, 4 * MiB, site, time_us=4),
               sf.trace_entry("oom", 512 * MiB, 2 * GiB, site, time_us=5),
               sf.trace_entry("segment_map", BASE, 2 * MiB, time_us=6),
               {"action": "some_future_action", "addr": 1, "size": 2, "stream": 0, "frames": []}],
              [sf.trace_entry("alloc", BASE + GiB, 1 * MiB)]]
    s = load_snapshot(sf.write(tmp_path / "t.pickle", sf.snapshot([], traces)))
    t = s.trace
    assert list(t["device"]) == [0] * 7 + [1]
    assert list(t["action"].astype(str))[:6] == ["segment_alloc", "alloc", "free_requested", "free_completed",
                                                 "oom", "segment_map"]
    assert t["action"].iloc[6] == "some_future_action"   # kept, not dropped
    oom = t.iloc[4]
    assert pd.isna(oom["addr"]) and oom["device_free"] == 512 * MiB and oom["size"] == 2 * GiB
    assert t["addr"].iloc[1] == BASE and list(t["time_us"][:6]) == [1, 2, 3, 4, 5, 6]
    assert (t["frames"][:5] == "train.py:7:forward").all() and pd.isna(t["frames"].iloc[5])
    # pre-2.1 traces have no time_us
    old = load_snapshot(sf.write(tmp_path / "old.pickle", sf.pre21(sf.snapshot([], traces))))
    assert old.trace["time_us"].isna().all() and len(old.trace) == 8


def test_pending_free_and_expandable(tmp_path):
    seg = sf.segment(BASE, [sf.block(10 * MiB, sf.A), sf.block(6 * MiB, sf.P), sf.block(4 * MiB, sf.I)],
                     expandable=True)
    s = load_snapshot(sf.write(tmp_path / "p.pickle", sf.snapshot([seg])))
    row = s.fragmentation().iloc[0]
    assert (row["allocated_bytes"], row["pending_free_bytes"], row["free_bytes"]) == (10 * MiB, 6 * MiB, 4 * MiB)
    assert s.segments["is_expandable"].iloc[0]
    assert s.segments["active_size"].iloc[0] == 16 * MiB


def test_frames_shared_or_not_format_alike():
    shared = sf.stack()
    segs = [sf.segment(BASE + i * GiB, [sf.block(MiB, sf.A, frames=shared if i % 2 else sf.stack())])
            for i in range(4)]
    s = Snapshot.from_data(sf.snapshot(segs))
    assert s.blocks["frames"].nunique() == 1 and s.blocks["stack"].nunique() == 1


@pytest.mark.parametrize("frames, top", [
    ([sf.frame("/usr/lib/python3.11/site-packages/torch/nn/functional.py", 5, "linear"),
      sf.frame("/usr/lib/python3.11/site-packages/transformers/models/bert.py", 9, "forward")],
     "bert.py:9:forward"),                                      # third-party model code counts as the user's
    ([sf.frame("??", 0, "malloc"), sf.frame("/x/site-packages/torch/a.py", 3, "f")], "a.py:3:f"),
    ([sf.frame("/pytorch/c10/Alloc.cpp", 1, "c10::alloc")], "Alloc.cpp:1:c10::alloc"),
    # C++ frames only (the autograd engine's thread): the backward function, else the op
    ([sf.frame("??", 0, "torch::unwind::unwind()"), sf.frame("??", 0, "at::_ops::mm::redispatch(...)"),
      sf.frame("??", 0, "torch::autograd::generated::AddmmBackward0::apply(...)"),
      sf.frame("??", 0, "torch::autograd::Engine::thread_main(...)")], "backward:AddmmBackward0"),
    ([sf.frame("??", 0, "torch::unwind::unwind()"), sf.frame("??", 0, "at::_ops::sum_dim_IntList::call(...)")],
     "op:sum_dim_IntList"),
    ([sf.frame("??", 0, "torch::unwind::unwind()"), sf.frame("??", 0, "torch::autograd::Engine::thread_main(...)")],
     "backward"),
    ([sf.frame("/usr/lib/python3.11/threading.py", 1, "run"), sf.frame("/srv/app.py", 3, "main")], "app.py:3:main"),
    ([sf.frame("/venv/lib/python3.11/site-packages/memleak/probes/census.py", 4, "sample"),
      sf.frame("/home/me/memleak/train.py", 7, "step")], "train.py:7:step"),  # a project folder named memleak
])
def test_top_user_frame(frames, top):
    s = Snapshot.from_data(sf.snapshot([sf.segment(BASE, [sf.block(MiB, sf.A, frames=frames)])]))
    assert s.blocks["frames"].iloc[0] == top


# ---------------------------------------------------------------- unreadable, hostile, not a snapshot

class _Hostile:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_pickle_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(_Hostile(marker)))
    with pytest.raises(RunFileError) as e:
        load_snapshot(path)
    assert not marker.exists()
    msg = str(e.value)
    assert str(path) in msg and f"refuses to build {os.system.__module__}.system" in msg
    assert "snapshot pickles hold only plain containers" in msg


def test_hostile_payload_inside_a_snapshot(tmp_path):
    marker = tmp_path / "pwned"
    snap = sf.snapshot([sf.segment(BASE, [sf.block(MiB, sf.A, frames=[{"filename": _Hostile(marker)}])])])
    path = tmp_path / "evil2.pkl"
    path.write_bytes(pickle.dumps(snap))
    with pytest.raises(RunFileError, match="refuses to build"):
        load_snapshot(path)
    assert not marker.exists()


def test_even_harmless_classes_are_refused(tmp_path):
    from collections import OrderedDict

    path = sf.write(tmp_path / "od.pickle", OrderedDict(segments=[]))
    with pytest.raises(RunFileError, match=r"refuses to build collections\.OrderedDict"):
        load_snapshot(path)


def _truncated():
    raw = pickle.dumps(sf.fragmented())
    return raw[: len(raw) // 2]


@pytest.mark.parametrize("content, problem", [
    (b"", "empty"),
    (_truncated(), "truncated"),
    (b"\x80\x04\x95garbage-garbage-garbage", "not a readable pickle"),
    (b"\x80\x04not a pickle at all", "not a readable pickle"),
    (pickle.dumps(42), "holds a int"),
    (pickle.dumps("segments"), "holds a str"),
    (pickle.dumps(({"segments": []},)), "holds a tuple"),
    (pickle.dumps({"traces": [], "blocks": []}), "no 'segments' key"),
    (pickle.dumps({"segments": {"a": 1}}), "'segments' is a dict"),
    (pickle.dumps([1, 2, 3]), "segment 0 is not a dict"),
    (pickle.dumps({"segments": [{"total_size": 1, "blocks": [{"size": 1}]}]}), "block 0 of segment 0"),
    (pickle.dumps({"segments": [], "device_traces": [["alloc"]]}), "device_traces[0]"),
    (pickle.dumps({"segments": [], "device_traces": {"0": []}}), "not a list of lists"),
    (pickle.dumps({"segments": [{"total_size": "big", "address": 0, "blocks": [{"size": "x", "state": "inactive"}]}]}),
     "wrong type"),
    (pickle.dumps(sf.snapshot([sf.segment(BASE, [sf.block(MiB, frames=[{"filename": "a.py"}])])])), "missing"),
])
def test_unreadable_files_name_the_file_and_the_problem(tmp_path, content, problem):
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(RunFileError) as e:
        load_snapshot(path)
    assert str(path) in str(e.value) and problem in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(RunFileError, match="cannot read"):
        load_snapshot(tmp_path / "nope.pickle")


def test_storage_load_dispatches_pickles(frag_file, tmp_path):
    from memleak.io import load

    assert isinstance(load(frag_file), Snapshot)
    raw = tmp_path / "snapshot_without_suffix"
    raw.write_bytes(frag_file.read_bytes())
    assert isinstance(load(raw), Snapshot)


# ---------------------------------------------------------------- fragmentation, by hand

def test_fragmentation_by_hand(frag_file):
    f = load_snapshot(frag_file).fragmentation().set_index("pool")
    large, small = f.loc["large"], f.loc["small"]
    allocated = 20 * 20 * MiB + 224 * MiB
    requested = 20 * (20 * MiB - 512) + 200 * MiB
    free = 20 * 20 * MiB + 256 * MiB
    assert large["segments"] == 2 and large["reserved_bytes"] == GiB + 256 * MiB
    assert (large["allocated_bytes"], large["requested_bytes"], large["free_bytes"]) == (allocated, requested, free)
    assert large["largest_free_bytes"] == 256 * MiB
    assert large["inactive_split_bytes"] == 20 * 20 * MiB        # the wholly free segment is releasable, not split
    assert large["external_fragmentation"] == pytest.approx(1 - 256 / 656)
    assert large["internal_fragmentation"] == pytest.approx((allocated - requested) / allocated)
    assert (small["reserved_bytes"], small["allocated_bytes"], small["requested_bytes"]) == (2 * MiB, 512, 500)
    assert small["inactive_split_bytes"] == 2 * MiB - 512 and small["external_fragmentation"] == 0
    assert small["internal_fragmentation"] == pytest.approx(12 / 512)


def test_empty_snapshot(tmp_path):
    s = load_snapshot(sf.write(tmp_path / "empty.pickle", []))
    assert s.fragmentation().empty and detect_snapshot(s) == [] and s.blocks.empty
    assert "0 segments" in str(memleak.analyze(s))


_block = st.tuples(st.integers(1, 64).map(lambda k: k * 512 * 1024),
                   st.sampled_from([sf.A, sf.P, sf.I]),
                   st.floats(0.5, 1.0))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.lists(_block, min_size=1, max_size=8)), min_size=1, max_size=6))
def test_accounting_holds_for_any_layout(layout):
    segs = [sf.segment(BASE + i * GiB, [sf.block(size, state, int(size * r)) for size, state, r in blocks],
                       device=dev) for i, (dev, blocks) in enumerate(layout)]
    s = Snapshot.from_data(sf.snapshot(segs))
    f = s.fragmentation()
    assert (f["reserved_bytes"] == f["allocated_bytes"] + f["pending_free_bytes"] + f["free_bytes"]).all()
    assert (f["requested_bytes"] <= f["allocated_bytes"]).all()
    assert (f["largest_free_bytes"] <= f["free_bytes"]).all() and (f["inactive_split_bytes"] <= f["free_bytes"]).all()
    assert f["external_fragmentation"].between(0, 1).all() and f["internal_fragmentation"].between(0, 1).all()
    assert f["reserved_bytes"].sum() == s.segments["total_size"].sum()
    assert Snapshot.from_data(pickle.loads(pickle.dumps(sf.snapshot(segs)))).fragmentation().equals(f)


# ---------------------------------------------------------------- findings and summary

def test_fragmented_cache_is_a_finding(frag_file):
    (f,) = detect_snapshot(load_snapshot(frag_file))
    assert f.kind is Kind.FRAGMENTATION and f.leak is False
    assert f.total_bytes == 20 * 20 * MiB + 2 * MiB - 512
    assert f.confidence == pytest.approx(0.5 + f.total_bytes / (GiB + 256 * MiB + 2 * MiB))
    assert "expandable_segments:True" in f.fix and "cuda:0" in f.location


def test_healthy_cache_is_not():
    segs = [sf.segment(BASE, [sf.block(GiB, sf.A, frames=sf.stack())]),
            sf.segment(BASE + 2 * GiB, [sf.block(900 * MiB, sf.A), sf.block(124 * MiB, sf.I)]),
            sf.segment(BASE + 4 * GiB, [sf.block(2 * GiB, sf.I)])]
    assert detect_snapshot(Snapshot.from_data(sf.snapshot(segs))) == []


def test_settings_already_in_place_are_not_suggested():
    snap = sf.fragmented()
    snap["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "expandable_segments": True,
                                  "max_split_size": -1, "garbage_collection_threshold": 0.0}
    s = Snapshot.from_data(snap)
    assert s.alloc_conf() == {"expandable_segments": "True"}
    (f,) = detect_snapshot(s)
    assert f.fix.count("expandable_segments") == 1 and "max_split_size_mb:128" in f.fix


def test_oom_that_fragmentation_caused(tmp_path):
    # no stranded memory to speak of, but an OOM asked for more than any free block
    # while the cache plus the driver had enough free in all
    segs = [sf.segment(BASE, [sf.block(100 * MiB, sf.A), sf.block(60 * MiB, sf.I), sf.block(100 * MiB, sf.A),
                              sf.block(60 * MiB, sf.I), sf.block(8 * GiB, sf.A)])]
    traces = [[sf.trace_entry("oom", 30 * MiB, 128 * MiB, sf.stack(line=99))]]
    s = Snapshot.from_data(sf.snapshot(segs, traces))
    (f,) = detect_snapshot(s)
    assert f.confidence == 0.85 and "asked for 128.0 MiB at train.py:99:forward" in f.evidence[0]
    assert "garbage_collection_threshold:0.8" in f.fix
    # an OOM asking for more than cache and driver hold together is a full device, not fragmentation
    traces = [[sf.trace_entry("oom", 30 * MiB, 4 * GiB)]]
    assert detect_snapshot(Snapshot.from_data(sf.snapshot(segs, traces))) == []


def test_summary(frag_file, tmp_path):
    text = str(memleak.analyze(load_snapshot(frag_file)))
    assert str(frag_file) in text
    assert "largest free block 256.0 MiB" in text and "train.py:10:forward" in text
    assert "fragmentation" in text and "expandable_segments:True" in text
    traces = [[sf.trace_entry("oom", 30 * MiB, 4 * GiB)]]
    text = str(memleak.analyze(Snapshot.from_data(sf.snapshot([], traces))))
    assert "OOM on cuda:0: asked for 4.0 GiB with 30.0 MiB free" in text
    assert "1.3 GiB reserved" in repr(load_snapshot(frag_file))


# ---------------------------------------------------------------- diff

def _live(address, size, frames, requested=None):
    return {"address": address, "size": size, "requested_size": requested or size, "state": sf.A, "frames": frames}


def _snap(blocks):
    seg = {"device": 0, "address": BASE, "total_size": 64 * GiB, "stream": 0, "segment_type": "large",
           "allocated_size": 0, "active_size": 0, "blocks": blocks}
    return sf.snapshot([seg])


def test_diff_ranks_surviving_allocations(tmp_path):
    keep, cache, hist, old = (sf.stack(line=n) for n in (1, 2, 3, 4))
    before = [_live(BASE, GiB, keep), _live(BASE + GiB, MiB, old), _live(BASE + 2 * GiB, 8 * MiB, old)]
    after = [_live(BASE, GiB, keep),                                 # survived: not new
             _live(BASE + 2 * GiB, 8 * MiB, cache),                  # same address and size, other site: new
             *(_live(BASE + 3 * GiB + i * 100 * MiB, 100 * MiB, cache) for i in range(3)),
             *(_live(BASE + 4 * GiB + i * MiB, MiB, hist, requested=MiB - 100) for i in range(10)),
             _live(BASE + 5 * GiB, 2 * MiB, [])]
    a = sf.write(tmp_path / "a.pickle", _snap(before))
    b = load_snapshot(sf.write(tmp_path / "b.pickle", _snap(after)))
    d = diff(a, b)                                                   # a path and a Snapshot
    assert list(d.columns) == ["location", "count", "bytes", "requested_bytes", "stack"]
    assert list(d["location"]) == ["train.py:2:forward", "train.py:3:forward", "<no stack recorded>"]
    assert list(d["count"]) == [4, 10, 1]
    assert list(d["bytes"]) == [308 * MiB, 10 * MiB, 2 * MiB]
    assert d["requested_bytes"].iloc[1] == 10 * (MiB - 100)
    assert "/home/u/train.py:2:forward" in d["stack"].iloc[0]
    assert diff(b, b).empty


def test_diff_without_stacks_matches_by_address_and_size():
    before = sf.segment_list(_snap([_live(BASE, MiB, []), _live(BASE + MiB, MiB, [])]))
    after = _snap([_live(BASE, MiB, sf.stack()), _live(BASE + MiB, 2 * MiB, sf.stack())])
    d = diff(Snapshot.from_data(before), Snapshot.from_data(after))
    assert list(d["count"]) == [1] and list(d["bytes"]) == [2 * MiB]


def test_diff_multi_device():
    a = Snapshot.from_data(sf.snapshot([sf.segment(BASE, [sf.block(MiB, frames=sf.stack())], device=0)]))
    b = Snapshot.from_data(sf.snapshot([sf.segment(BASE, [sf.block(MiB, frames=sf.stack())], device=0),
                                        sf.segment(BASE, [sf.block(MiB, frames=sf.stack())], device=1)]))
    d = diff(a, b)
    assert list(d["count"]) == [1] and np.int64(d["bytes"].iloc[0]) == MiB
