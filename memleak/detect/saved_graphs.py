"""Retained graphs seen from autograd's side: tensors saved for backward on earlier deep steps
that graphs still hold (the ``saved`` records). When they grow, graphs are retained: the growing
holder that keeps graphs takes the evidence, else the site that saved the most."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..records import SavedRecord
from ..schema import Kind
from ..units import fmt_bytes
from .culprit_fixes import culprit_fix
from .culprit_table import Entries, entry
from .sampled_trend import MIN_COUNT_RISE, MIN_SAMPLES, sustained_rise


def saved_growth(saved: Sequence[SavedRecord]) -> dict | None:
    """The growth of what autograd still holds for backward, with the sites that saved it; None
    when it does not grow."""
    # the trend is judged on the steps that tagged: a walk alone (level auto's checks, its last
    # look when the run ends) tags nothing new, so what it finds cannot rise, whatever autograd
    # keeps (older run files, which do not say what each step tagged, keep every record)
    tagging = [r for r in saved if str(r.step) in r.tagged] or list(saved)
    if len(tagging) < MIN_SAMPLES:
        return None
    steps = [r.step for r in tagging]
    totals = [float(sum(c.bytes for c in r.cohorts)) for r in tagging]
    counts = [float(sum(c.count for c in r.cohorts)) for r in tagging]
    tr = sustained_rise(steps, totals, 1024, rel_rise=0.3) or sustained_rise(steps, counts, MIN_COUNT_RISE)
    if tr is None:
        return None
    # what autograd still holds, by the site that saved it and by the step that saved it
    sites: dict[str, int] = defaultdict(int)
    born: dict[int, int] = defaultdict(int)
    for c in tagging[-1].cohorts:  # the record its total is (a last look alone may list none)
        sites[c.site] += c.bytes
        born[c.born] += c.bytes
    top = sorted(sites.items(), key=lambda kv: -kv[1])
    return {
        "trend": tr,
        "steps": steps,
        "totals": totals,
        "counts": counts,
        "sites": top,
        "cohorts": len(born),
        # what one sampled step's graph still keeps (the median step): the rate where every step's is kept
        "per_cohort": sorted(born.values())[len(born) // 2] if born else 0,
    }


def attach_saved(info, findings: Entries, hkinds) -> None:
    """Credit the growth of saved tensors to the holder that keeps graphs, else to the top saving site."""
    tr = info["trend"]
    steps, totals = info["steps"], info["totals"]
    bps = (totals[-1] - totals[0]) / max(1, steps[-1] - steps[0])
    sites = ", ".join(s for s, _ in info["sites"][:3])
    ev = (
        f"autograd still holds {fmt_bytes(totals[-1])} of tensors saved for backward on {info['cohorts']} earlier "
        f"sampled steps (saved at {sites}), about {fmt_bytes(info['per_cohort'])} from each of them: graphs are "
        f"retained, not freed by backward"
    )
    keeper = _graph_keeper(findings)
    if keeper is not None:
        loc, f = keeper
        if f["kind"] != Kind.CACHED_TENSOR:
            f["kind"] = Kind.RETAINED_GRAPH
            if not (f["data"].get("chained") or f["data"].get("traceback") or f["data"].get("cycle")):
                f["fix"] = culprit_fix(Kind.RETAINED_GRAPH, loc, hkinds.get(loc, ""), False, True, True)
        f["evidence"].append(ev)
        f["bps"] = f["bps"] + max(bps, 0.0)
        f["total"] = f["total"] + totals[-1]
        f["confidence"] = max(f["confidence"], tr["confidence"])
        return
    loc = info["sites"][0][0] if info["sites"] else "autograd graph"
    f = entry(findings, loc, kind=Kind.RETAINED_GRAPH)
    f.update(
        kind=Kind.RETAINED_GRAPH,
        leak=True,
        confidence=max(f["confidence"], tr["confidence"] * 0.9),
        bps=max(f["bps"], bps),
        total=max(f["total"], totals[-1]),
        fix=culprit_fix(Kind.RETAINED_GRAPH, loc, "", False, True, True),
    )
    f["evidence"].append(ev + "; no variable memleak reached holds the graph's output")


def _graph_keeper(findings: Entries) -> tuple[str, dict] | None:
    """The growing holder with grad_fn tensors that keeps graphs: one that carries its graph into
    the next step first, then a retained graph, then the biggest graph, then a holder of surviving
    grad_fn tensors named by their referrers; None when none has a graph."""
    cands = [
        (loc, f)
        for loc, f in findings.items()
        if f.get("leak")
        and f["kind"] in (Kind.RETAINED_GRAPH, Kind.SURVIVING_TENSORS, Kind.CACHED_TENSOR)
        and (max(f.get("data", {}).get("nodes", [0]) or [0]) > 0 or f.get("data", {}).get("grad_tensors", 0) > 0)
    ]
    if not cands:
        return None
    return max(
        cands,
        key=lambda lf: (
            bool(lf[1]["data"].get("carried")),
            lf[1]["kind"] == Kind.RETAINED_GRAPH,
            max(lf[1]["data"].get("nodes", [0]) or [0]),
            lf[1]["data"].get("grad_tensors", 0),
        ),
    )
