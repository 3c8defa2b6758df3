"""The culprits detector on synthetic records (no torch): growth, bounded caches, retained graphs."""
from __future__ import annotations

from memleak.detect import culprits
from memleak.run import Run
from memleak.schema import Kind
from memleak.suspects import rank

import pandas as pd


def _run(records: dict) -> Run:
    return Run({"device": "cpu"}, pd.DataFrame({"step": range(40), "time": range(40)}), records=records)


def _holders(series: dict[str, list[dict]], steps):
    recs = []
    for i, s in enumerate(steps):
        rows = []
        for name, vals in series.items():
            v = vals[i]
            if v:
                rows.append({"holder": name, "kind": v.get("kind", "local"), "count": v.get("count", 0),
                             "bytes": v.get("bytes", 0), "grad": v.get("grad", 0), "old": v.get("old", 0),
                             "old_bytes": 0, "nodes": v.get("nodes", 0)})
        recs.append({"step": s, "holders": rows, "buffers": {}})
    return recs


STEPS = [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]


def test_growing_list_is_a_surviving_tensors_leak():
    hist = [{"count": s, "bytes": 1024 * s, "old": max(0, s - 2)} for s in STEPS]
    found = culprits.detect(_run({"holders": _holders({"history": hist}, STEPS)}))
    assert len(found) == 1
    f = found[0]
    assert f.kind == Kind.SURVIVING_TENSORS and f.location == "history" and f.leak
    assert 900 < f.bytes_per_step < 1200
    assert any("history holds" in e for e in f.evidence)
    assert "deque(maxlen" in f.fix or ".item()" in f.fix


def test_bounded_cache_and_constant_holder_are_not_leaks():
    bounded = [{"count": min(s, 8), "bytes": 1024 * min(s, 8)} for s in STEPS]
    const = [{"count": 1, "bytes": 4096, "old": 1} for s in STEPS]
    noisy = [{"count": 1, "bytes": b} for b in (4096, 9000, 2048, 12000, 3000, 8000, 5000, 11000, 2500, 7000)]
    found = culprits.detect(_run({"holders": _holders({"recent": bounded, "mask": const, "out": noisy}, STEPS)}))
    assert found == []


def test_chained_graph_is_a_retained_graph():
    total = [{"count": 1, "bytes": 4, "grad": 1, "old": 1, "nodes": 10 * s} for s in STEPS]
    found = culprits.detect(_run({"holders": _holders({"total_loss": total}, STEPS)}))
    assert [f.kind for f in found] == [Kind.RETAINED_GRAPH]
    assert ".item()" in found[0].fix


def test_carried_holder_outranks_what_hangs_off_it():
    hidden = [{"count": 1, "bytes": 2048, "grad": 1, "old": 0, "nodes": 100 * s} for s in STEPS]
    out = [{"count": 1, "bytes": 30000, "grad": 1, "old": 0, "nodes": 100 * s} for s in STEPS]
    recs = _holders({"hidden": hidden, "out": out}, STEPS)
    for r in recs[1:]:  # the probe marks the holder whose graph is built on what it held before
        next(row for row in r["holders"] if row["holder"] == "hidden")["linked"] = True
    sus = rank(culprits.detect(_run({"holders": recs})))
    assert sus[0].location == "hidden"
    assert ".detach()" in sus[0].fix


def test_module_attribute_is_a_cached_tensor():
    cache = [{"kind": "module_attr", "count": s, "bytes": 4096 * s, "grad": s} for s in STEPS]
    found = culprits.detect(_run({"holders": _holders({"blocks.1.attn.cache": cache}, STEPS)}))
    assert found[0].kind == Kind.CACHED_TENSOR and found[0].location == "blocks.1.attn.cache"


def test_births_surviving_from_every_sampled_step():
    births = []
    for s in STEPS:
        cohorts = [{"born": b, "site": "train.py:42", "holder": "", "count": 1, "bytes": 8192, "grad": 0}
                   for b in STEPS if b <= s - 2]
        births.append({"step": s, "cohorts": cohorts})
    found = culprits.detect(_run({"births": births, "holders": [{"step": s, "holders": []} for s in STEPS]}))
    assert len(found) == 1 and found[0].location == "train.py:42" and found[0].leak
    assert any("train.py:42" in e for e in found[0].evidence)


def test_births_of_a_bounded_cache_die():
    births = []
    for s in STEPS:
        cohorts = [{"born": b, "site": "train.py:7", "holder": "recent", "count": 1, "bytes": 8192, "grad": 0}
                   for b in STEPS if s - 9 <= b <= s - 2]
        births.append({"step": s, "cohorts": cohorts})
    found = culprits.detect(_run({"births": births, "holders": [{"step": s, "holders": []} for s in STEPS]}))
    assert found == []


def test_growing_saved_tensors_attach_to_the_holder():
    preds = [{"count": s, "bytes": 512 * s, "grad": s, "nodes": 5 * s} for s in STEPS]
    saved = [{"step": s, "cohorts": [{"born": b, "site": "eval.py:9", "count": 3, "bytes": 65536}
                                      for b in STEPS if b <= s - 2]} for s in STEPS]
    found = culprits.detect(_run({"holders": _holders({"preds": preds}, STEPS), "saved": saved}))
    assert len(found) == 1
    assert found[0].kind == Kind.RETAINED_GRAPH and found[0].location == "preds"
    assert "no_grad" in found[0].fix
    assert any("saved for backward" in e for e in found[0].evidence)


def test_too_few_samples_decide_nothing():
    hist = [{"count": s, "bytes": 1024 * s} for s in STEPS[:2]]
    assert culprits.detect(_run({"holders": _holders({"history": hist}, STEPS[:2])})) == []


def _cycle_records() -> dict:
    """Unreachable survivors of ops.py:9 that accumulate until step 15, are all gone by the walk at
    17, and accumulate again."""
    steps = list(range(1, 30, 2))
    births = []
    for s in steps:
        start = 1 if s <= 15 else 15
        cohorts = [{"born": b, "site": "ops.py:9", "holder": "", "count": 1, "bytes": 4096, "grad": 1}
                   for b in steps if start <= b <= s - 2]
        births.append({"step": s, "cohorts": cohorts})
    return {"births": births, "holders": [{"step": s, "holders": []} for s in steps]}


def test_unreachable_survivors_freed_at_once_were_held_by_a_cycle():
    found = culprits.detect(_run(_cycle_records()))
    assert len(found) == 1 and found[0].location == "ops.py:9" and found[0].leak
    assert any("freed all at once" in e for e in found[0].evidence)


def test_survivors_that_a_later_walk_no_longer_lists_apart_were_not_freed_without_a_collection():
    """The same mass disappearance, where the run's gc_collections says no full collection ran
    between the two walks: the tensors were not freed (an inference loop's graph-saved tensors, listed
    apart by the deep steps and through their holder by the last walk); with one in between, they were."""

    def found_with(collections_at):
        gc = [sum(1 for c in collections_at if c <= i) for i in range(40)]
        run = Run({"device": "cpu"}, pd.DataFrame({"step": range(40), "time": range(40), "gc_collections": gc}),
                  records=_cycle_records())
        return culprits.detect(run)

    assert not any("freed all at once" in e for f in found_with([3, 30]) for e in f.evidence)
    collected = found_with([16])  # a full collection in step 16, between the walks at 15 and 17
    assert len(collected) == 1 and any("freed all at once" in e for e in collected[0].evidence)


def test_a_named_container_reset_each_epoch_is_not_a_leak():
    steps = list(range(1, 40, 2))
    births, hold = [], []
    for s in steps:
        start = (s // 12) * 12  # metric.reset() every 12 steps
        cohorts = [{"born": b, "site": "eval.py:3", "holder": "metric.preds", "count": 1, "bytes": 4096, "grad": 0}
                   for b in steps if max(start, 1) <= b <= s - 2]
        births.append({"step": s, "cohorts": cohorts})
        n = len([b for b in steps if max(start, 1) <= b <= s])
        hold.append({"step": s, "holders": [{"holder": "metric.preds", "kind": "local", "count": n,
                                             "bytes": 4096 * n, "grad": 0, "old": 0, "old_bytes": 0, "nodes": 0}]})
    assert culprits.detect(_run({"births": births, "holders": hold})) == []


def test_a_graph_built_afresh_each_step_is_not_retained():
    # the graph grows (a curriculum lengthens the unroll) but its nodes are new at every sample
    fresh = [{"count": 1, "bytes": 4, "grad": 1, "nodes": 10 * s} for s in STEPS]
    rows = _holders({"loss": fresh}, STEPS)
    for i, r in enumerate(rows):
        r["holders"][0]["seq"] = [1000 * i, 1000 * i + 10 * STEPS[i]]
    assert culprits.detect(_run({"holders": rows})) == []
    # the same sizes with the oldest node kept from the first sample: a chain
    for i, r in enumerate(rows):
        r["holders"][0]["seq"] = [5, 1000 * i + 10 * STEPS[i]]
    assert [f.kind for f in culprits.detect(_run({"holders": rows}))] == [Kind.RETAINED_GRAPH]


def test_the_plots_graph_rate_is_the_rate_the_evidence_gives_also_past_the_walks_cap():
    from memleak.report.series import graph_growth

    # 7 nodes a step until the walk's cap at 165 nodes: the rate is judged up to the cap, and the
    # plot must show that rate, not the first-to-last average that the capped samples drag down
    nodes = [min(11 + 7 * (s - 1), 165) for s in STEPS]
    hist = [{"count": s, "bytes": 4 * s, "grad": s, "old": max(0, s - 2), "nodes": n} for s, n in zip(STEPS, nodes)]
    recs = _holders({"history": hist}, STEPS)
    for r in recs:
        row = r["holders"][0]
        row["capped"] = row["nodes"] >= 165
    (f,) = culprits.detect(_run({"holders": recs}))
    rate = graph_growth([f])["history"]
    assert rate == f.data["nodes_per_step"]
    assert f"+{rate:.1f} nodes per step" in " ".join(f.evidence)
    assert rate > (nodes[-1] - nodes[0]) / (STEPS[-1] - STEPS[0]) + 1
