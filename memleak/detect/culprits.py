"""Culprits: what keeps memory alive, named by holder or creation site, with the fix.

Pure over the records the TensorProbe and ModuleProbe write (docs/detectors-culprits.md):

- ``holders``: per deep step, what each named holder (a variable, a module
  attribute, an object attribute, a closure) holds: tensors, bytes, how many
  are two or more steps old, how many carry a ``grad_fn``, and the size of the
  autograd graph they reach. A holder whose count, bytes or graph keeps
  growing from sample to sample is a culprit.
- ``births``: tensors created on earlier deep steps that are still alive, by
  creation site and holder. A site whose tensors from most deep steps since the
  start are all still alive accumulates (a bounded cache lets its old ones go).
- ``saved``: tensors autograd saved for backward on earlier deep steps that a
  graph still holds. Growing: graphs are retained.
- ``modules``: per-module outputs still alive steps later, and forward deltas.

Each cause gives one finding per location; suspects.rank merges findings with
the same location.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from ..run import Run
from ..schema import Finding, Kind
from ..units import fmt_bytes

NAME = "culprits"

#: Fewest samples (deep steps) on which a growth can be judged.
MIN_SAMPLES = 3
#: Tensors a holder must gain over the run before its count counts as growth.
MIN_COUNT_RISE = 2
#: Graph nodes a holder must gain before a growing graph counts.
MIN_NODE_RISE = 8
#: Share of the checked deep steps whose tensors must still be alive for a site to accumulate.
MIN_SURVIVING_SHARE = 0.6
MIN_COHORTS = 3


# ---------------------------------------------------------------- helpers
def _trend(steps: list[int], values: list[float], min_rise: float, rel_rise: float = 0.0) -> dict | None:
    """Monotone, sustained growth of `values` over `steps`; None when it does not grow."""
    n = len(values)
    if n < MIN_SAMPLES:
        return None
    v = np.asarray(values, dtype=float)
    x = np.asarray(steps, dtype=float)
    rise = v[-1] - v[0]
    if rise < max(min_rise, rel_rise * max(abs(v[0]), 1.0)):
        return None
    d = np.diff(v)
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    if pos < max(2, 0.5 * (n - 1)) or neg > 0.25 * (n - 1):
        return None
    mid = n // 2
    if not (v[-1] > v[mid] and v[mid] >= v[0]):  # still growing in the second half: not a filling cache
        return None
    # Theil-Sen slope per step
    slopes = [(v[j] - v[i]) / (x[j] - x[i]) for i in range(n) for j in range(i + 1, n) if x[j] > x[i]]
    slope = float(np.median(slopes)) if slopes else 0.0
    mono = pos / (n - 1)
    conf = 0.5 + 0.45 * min(1.0, mono * min(1.0, (n - 1) / 5))
    return {"slope": slope, "rise": float(rise), "first": float(v[0]), "last": float(v[-1]), "n": n,
            "confidence": round(conf, 3), "span": int(x[-1] - x[0])}


def _series(records: list[dict], key: str) -> tuple[list[int], dict[str, list[dict | None]]]:
    steps = [r["step"] for r in records]
    by: dict[str, list[dict | None]] = defaultdict(lambda: [None] * len(records))
    for i, r in enumerate(records):
        for row in r.get(key, []):
            by[row["holder"]][i] = row
    return steps, dict(by)


def _col(rows: list[dict | None], key: str) -> list[float]:
    return [float(r.get(key, 0) or 0) if r else 0.0 for r in rows]


def _count_words(n: float) -> str:
    n = int(round(n))
    return f"{n} tensor" + ("" if n == 1 else "s")


def _per_step(x: float) -> str:
    if x >= 0.95 and abs(x - round(x)) < 0.15:
        r = int(round(x))
        return "one more each step" if r == 1 else f"{r} more each step"
    if x >= 0.05:
        return f"one more every {1 / x:.0f} steps" if x < 0.95 else f"{x:.1f} more each step"
    return "slowly more"


# ---------------------------------------------------------------- fixes
def _fix(kind: Kind, holder: str, hkind: str, chained: bool, has_grad: bool, saved_growing: bool) -> str:
    if kind == Kind.RETAINED_GRAPH and chained:
        return (f"`{holder}` links each step's autograd graph to the previous one, so no graph is ever freed. "
                f"Accumulate a Python number instead (`{holder} += loss.item()`), or cut the link with "
                f"`.detach()` where the tensor is carried into the next step (an RNN hidden state: "
                f"`h = h.detach()` each step); then `backward()` needs no `retain_graph=True`.")
    if kind == Kind.RETAINED_GRAPH:
        return (f"`{holder}` keeps tensors together with their autograd graphs (every activation saved for "
                f"backward). Run evaluation/inference under `torch.no_grad()` or `torch.inference_mode()`, "
                f"store `out.detach()` (`.cpu()`, or `.item()` for a scalar), and call `backward()` without "
                f"`retain_graph=True` unless a second backward really needs it.")
    if ".ctx." in holder:
        return (f"the custom autograd Function stores tensors as attributes of `ctx` ({holder}), which makes a "
                f"reference cycle through the graph that is never freed: save them with "
                f"`ctx.save_for_backward(...)` and read `ctx.saved_tensors` in backward.")
    grad = " and `.detach()` them (they carry autograd graphs)" if has_grad else ""
    if kind == Kind.CACHED_TENSOR:
        return (f"the module attribute `{holder}` gains tensors every forward: do not cache on `self` across "
                f"steps (reset it at the start of each forward/step), or bound it "
                f"(`collections.deque(maxlen=...)`){grad}. A tensor that must persist belongs in "
                f"`register_buffer` with a fixed size.")
    if hkind == "closure":
        return (f"`{holder}` is captured by a closure (a hook or callback) and gains tensors every step: store "
                f"`t.detach().cpu()` or a number, clear it after use, or remove the hook when done{grad}.")
    if hkind == "unreachable":
        return ("tensors created here stay alive although no variable, attribute or container memleak could "
                "reach holds them: typically a reference cycle through autograd (a custom autograd Function "
                "storing tensors on `ctx` or `self` instead of `ctx.save_for_backward`, a tensor hook or "
                "closure capturing its own tensor). Break the cycle, or `.detach()` what is stored.")
    if "." in holder and not holder.startswith("<"):
        return (f"`{holder}` accumulates tensors (a metric or accumulator state): call its `reset()` (or clear "
                f"it) after each `compute()`/epoch, keep numbers (`.item()`) or `.detach().cpu()` copies, or "
                f"bound it with `collections.deque(maxlen=...)`{grad}.")
    return (f"`{holder}` gains tensors every step: append a number (`loss.item()`) or a detached copy "
            f"(`t.detach().cpu()`), bound it with `collections.deque(maxlen=...)`, or clear it regularly{grad}.")


# ---------------------------------------------------------------- detector
def detect(run: Run) -> list[Finding]:
    holders = sorted(run.records.get("holders", []), key=lambda r: r["step"])
    births = sorted(run.records.get("births", []), key=lambda r: r["step"])
    saved = sorted(run.records.get("saved", []), key=lambda r: r["step"])
    modules = sorted(run.records.get("modules", []), key=lambda r: r["step"])
    findings: dict[str, dict[str, Any]] = {}

    # Holder kinds, as the walk named them.
    hkinds: dict[str, str] = {}
    for r in holders:
        for row in r.get("holders", []):
            hkinds.setdefault(row["holder"], row.get("kind", ""))

    saved_info = _saved_growth(saved)
    _holder_findings(holders, hkinds, saved_info, findings)
    _buffer_findings(holders, findings)
    _birth_findings(births, holders, hkinds, findings)
    if saved_info is not None:
        _attach_saved(saved_info, findings, hkinds)
    _module_evidence(modules, findings)
    out = []
    for loc, f in findings.items():
        out.append(Finding(detector=NAME, kind=f["kind"], location=loc, bytes_per_step=float(f["bps"]),
                           total_bytes=float(f["total"]), confidence=float(min(0.99, f["confidence"])),
                           evidence=tuple(f["evidence"]), fix=f["fix"], leak=bool(f["leak"]),
                           data=f.get("data", {})))
    return out


def _new(findings, loc, **kw) -> dict:
    f = findings.get(loc)
    if f is None:
        f = findings[loc] = {"evidence": [], "data": {}, "leak": False, "confidence": 0.0, "bps": 0.0,
                             "total": 0.0, **kw}
    return f


def _holder_findings(holders, hkinds, saved_info, findings) -> None:
    if len(holders) < MIN_SAMPLES:
        return
    steps, by = _series(holders, "holders")
    for name, rows in by.items():
        count, nbytes = _col(rows, "count"), _col(rows, "bytes")
        grad, nodes = _col(rows, "grad"), _col(rows, "nodes")
        old = _col(rows, "old")
        last = next((r for r in reversed(rows) if r), {})
        c_tr = _trend(steps, count, MIN_COUNT_RISE)
        b_tr = _trend(steps, nbytes, 1024, rel_rise=0.5) if max(nbytes) > 0 else None
        # a capped graph count keeps growing past the cap
        cap_at = next((i for i, r in enumerate(rows) if r and r.get("capped")), None)
        nsteps, nvals = (steps, nodes) if cap_at is None else (steps[: cap_at + 1], nodes[: cap_at + 1])
        n_tr = _trend(nsteps, nvals, MIN_NODE_RISE)
        if not (c_tr or b_tr or n_tr):
            continue
        hkind = hkinds.get(name, "")
        has_grad = grad[-1] > 0
        chained = n_tr is not None and c_tr is None
        saved_growing = saved_info is not None and has_grad
        if hkind in ("module_attr", "buffer"):
            kind = Kind.CACHED_TENSOR
        elif chained or (saved_growing and (c_tr or n_tr)):
            kind = Kind.RETAINED_GRAPH
        else:
            kind = Kind.SURVIVING_TENSORS
        tr = c_tr or b_tr or n_tr
        bps = (b_tr["slope"] if b_tr else 0.0) or (nbytes[-1] - nbytes[0]) / max(1, steps[-1] - steps[0])
        f = _new(findings, name, kind=kind)
        f.update(kind=kind, leak=True, confidence=max(f["confidence"], max(t["confidence"] for t in (c_tr, b_tr, n_tr) if t)),
                 bps=max(f["bps"], bps), total=max(f["total"], nbytes[-1]),
                 fix=_fix(kind, name, hkind, chained, has_grad, saved_growing),
                 data={**f["data"], "holder_kind": hkind, "steps": steps, "count": count, "bytes": nbytes,
                       "nodes": nodes})
        where = {"module_attr": "the module attribute", "buffer": "the buffer", "closure": "the closure variable",
                 "class_attr": "the class attribute", "global": "the global", "local": "the variable",
                 "hook": "the hook object"}.get(hkind, "")
        size = fmt_bytes(nbytes[-1])
        if c_tr:
            f["evidence"].append(
                f"{where + ' ' if where else ''}{name} holds {_count_words(count[-1])} of {size} at step {steps[-1]}, "
                f"up from {int(round(count[0]))} at step {steps[0]} ({_per_step(c_tr['slope'])}, "
                f"{fmt_bytes(bps)} per step); {int(round(old[-1]))} of them are two or more steps old")
        elif b_tr:
            f["evidence"].append(
                f"{where + ' ' if where else ''}{name} grows from {fmt_bytes(nbytes[0])} at step {steps[0]} to {size} "
                f"at step {steps[-1]} ({fmt_bytes(bps)} per step) while holding {_count_words(count[-1])}")
        if n_tr:
            capped = " (counted up to the cap)" if cap_at is not None else ""
            f["evidence"].append(
                f"the autograd graph reachable from {name} grows from {int(nodes[0])} to {int(max(nvals))} nodes"
                f"{capped} between steps {steps[0]} and {nsteps[-1]} (+{n_tr['slope']:.1f} nodes per step): "
                + ("each step's graph is chained to the previous one" if chained else
                   "each held tensor keeps its graph"))
        elif has_grad:
            f["evidence"].append(f"{int(round(grad[-1]))} of its tensors carry a grad_fn (their autograd graphs stay alive)")
        if last.get("note"):
            f["evidence"].append(last["note"])
        if last.get("estimated"):
            f["evidence"].append("counts of long containers are estimated from their first and last elements")


def _buffer_findings(holders, findings) -> None:
    if len(holders) < MIN_SAMPLES:
        return
    steps = [r["step"] for r in holders]
    paths = {p for r in holders for p in r.get("buffers", {})}
    for p in paths:
        vals = [float((r.get("buffers", {}).get(p) or [0, 0])[1]) for r in holders]
        tr = _trend(steps, vals, 1024, rel_rise=0.2)
        if tr is None:
            continue
        f = _new(findings, p, kind=Kind.CACHED_TENSOR)
        f.update(kind=Kind.CACHED_TENSOR, leak=True, confidence=max(f["confidence"], tr["confidence"]),
                 bps=max(f["bps"], tr["slope"]), total=max(f["total"], vals[-1]),
                 fix=(f"the registered buffer `{p}` grows (it is replaced by a larger tensor every step): keep "
                      f"buffers a fixed size (preallocate and write in place, or keep a bounded window)."))
        f["evidence"].append(f"the registered buffer {p} grows from {fmt_bytes(vals[0])} at step {steps[0]} to "
                             f"{fmt_bytes(vals[-1])} at step {steps[-1]} ({fmt_bytes(tr['slope'])} per step)")


def _birth_findings(births, holders, hkinds, findings) -> None:
    if not births:
        return
    deep = sorted({r["step"] for r in holders}) or sorted({c["born"] for r in births for c in r.get("cohorts", [])})
    last = births[-1]
    s = last["step"]
    eligible = [d for d in deep if d <= s - 2][-12:]
    if len(eligible) < MIN_COHORTS:
        return
    groups: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for c in last.get("cohorts", []):
        groups[(c["site"], c.get("holder") or "")][c["born"]] = c
    # how many cohorts each key had alive on each record: growth of that number is accumulation
    history: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(births))
    for i, r in enumerate(births):
        seen = defaultdict(set)
        for c in r.get("cohorts", []):
            seen[(c["site"], c.get("holder") or "")].add(c["born"])
        for k, v in seen.items():
            history[k][i] = len(v)
    for (site, holder), cohorts in groups.items():
        alive = sorted(b for b in cohorts if b in eligible)
        if len(alive) < MIN_COHORTS:
            continue
        share = len(alive) / len(eligible)
        oldest_kept = alive[0] <= eligible[min(1, len(eligible) - 1)]
        if share < MIN_SURVIVING_SHARE or not oldest_kept or s - alive[0] < 6:
            continue
        per = [cohorts[b]["bytes"] for b in alive]
        counts = [cohorts[b]["count"] for b in alive]
        grads = sum(cohorts[b]["grad"] for b in alive)
        bps = float(np.median(per))
        loc = holder or site
        hkind = hkinds.get(holder, "unreachable" if not holder else "")
        if ".ctx." in holder:
            hkind = "autograd_ctx"
        kind = Kind.CACHED_TENSOR if hkind in ("module_attr", "buffer") else Kind.SURVIVING_TENSORS
        f = findings.get(loc)
        conf = 0.55 + 0.4 * min(1.0, share) * min(1.0, len(alive) / 6)
        if f is None:
            f = _new(findings, loc, kind=kind)
            f.update(fix=_fix(kind, loc, hkind, False, grads > 0, False), kind=kind)
        f["leak"] = True
        f["confidence"] = max(f["confidence"], conf)
        f["bps"] = max(f["bps"], bps)
        total_alive = sum(per)
        f["total"] = max(f["total"], total_alive)
        held = f"held by {holder}" if holder else "held by nothing memleak could name (not a variable, attribute or container it reached)"
        f["evidence"].append(
            f"tensors created at {site} on {len(alive)} of the last {len(eligible)} sampled steps are still alive at "
            f"step {s} (the oldest from step {alive[0]}, {s - alive[0]} steps ago): about {np.median(counts):.0f} "
            f"tensor(s) of {fmt_bytes(bps)} from each step, {held}")
        f["data"].setdefault("sites", []).append(site)


def _saved_growth(saved) -> dict | None:
    if len(saved) < MIN_SAMPLES:
        return None
    steps = [r["step"] for r in saved]
    totals = [float(sum(c["bytes"] for c in r.get("cohorts", []))) for r in saved]
    counts = [float(sum(c["count"] for c in r.get("cohorts", []))) for r in saved]
    tr = _trend(steps, totals, 1024, rel_rise=0.3) or _trend(steps, counts, MIN_COUNT_RISE)
    if tr is None:
        return None
    sites: dict[str, int] = defaultdict(int)
    for c in saved[-1].get("cohorts", []):
        sites[c.get("site", "?")] += c["bytes"]
    top = sorted(sites.items(), key=lambda kv: -kv[1])
    return {"trend": tr, "steps": steps, "totals": totals, "counts": counts, "sites": top,
            "cohorts": len({c["born"] for c in saved[-1].get("cohorts", [])})}


def _attach_saved(info, findings, hkinds) -> None:
    tr = info["trend"]
    steps, totals = info["steps"], info["totals"]
    bps = (totals[-1] - totals[0]) / max(1, steps[-1] - steps[0])
    sites = ", ".join(s for s, _ in info["sites"][:3])
    ev = (f"autograd still holds {fmt_bytes(totals[-1])} of tensors saved for backward on {info['cohorts']} earlier "
          f"sampled steps (saved at {sites}); it grows {fmt_bytes(bps)} per step: graphs are retained, not freed "
          f"by backward")
    # the holders that keep graphs: growing holders with grad_fn tensors, biggest graph first
    cands = [(loc, f) for loc, f in findings.items() if f.get("leak") and f["kind"] in
             (Kind.RETAINED_GRAPH, Kind.SURVIVING_TENSORS, Kind.CACHED_TENSOR)
             and max(f.get("data", {}).get("nodes", [0]) or [0]) > 0]
    if cands:
        loc, f = max(cands, key=lambda lf: (lf[1]["kind"] == Kind.RETAINED_GRAPH, max(lf[1]["data"]["nodes"])))
        if f["kind"] != Kind.CACHED_TENSOR:
            f["kind"] = Kind.RETAINED_GRAPH
            chained = f["fix"].startswith(f"`{loc}` links")
            f["fix"] = _fix(Kind.RETAINED_GRAPH, loc, hkinds.get(loc, ""), chained, True, True)
        f["evidence"].append(ev)
        f["bps"] = f["bps"] + max(bps, 0.0)
        f["total"] = f["total"] + totals[-1]
        f["confidence"] = max(f["confidence"], tr["confidence"])
        return
    loc = info["sites"][0][0] if info["sites"] else "autograd graph"
    f = _new(findings, loc, kind=Kind.RETAINED_GRAPH)
    f.update(kind=Kind.RETAINED_GRAPH, leak=True, confidence=max(f["confidence"], tr["confidence"] * 0.9),
             bps=max(f["bps"], bps), total=max(f["total"], totals[-1]),
             fix=_fix(Kind.RETAINED_GRAPH, loc, "", False, True, True))
    f["evidence"].append(ev + "; no variable memleak reached holds the graph's output")


def _module_evidence(modules, findings) -> None:
    if not modules:
        return
    last = modules[-1]
    rows = {r[0]: r for r in last.get("modules", [])}
    # outputs of a module forward still alive two or more steps later, by module
    alive: dict[str, dict[int, list]] = defaultdict(dict)
    for path, born, count, nbytes in last.get("alive", []):
        alive[path][born] = [count, nbytes]
    detail_steps = sorted({r["step"] for r in modules})
    eligible = [d for d in detail_steps if d <= last["step"] - 2][-8:]
    kept_modules = []
    for path, by_born in alive.items():
        k = [b for b in eligible if b in by_born]
        if len(eligible) >= MIN_COHORTS and len(k) >= MIN_COHORTS and len(k) / len(eligible) >= MIN_SURVIVING_SHARE:
            kept_modules.append((path, len(k), float(np.median([by_born[b][1] for b in k]))))
    kept_modules.sort(key=lambda x: -x[2])
    leaks = sorted((lf for lf in findings.items() if lf[1].get("leak")), key=lambda lf: -lf[1]["bps"])
    for path, n, per in kept_modules[:3]:
        ev = (f"outputs of {path}'s forward from {n} of the last {len(eligible)} sampled steps are still alive "
              f"({fmt_bytes(per)} per step)")
        match = next((f for loc, f in leaks if f["bps"] > 0 and 0.3 <= per / f["bps"] <= 3.0), None)
        if match is not None:
            match["evidence"].append(ev)
        elif not leaks:
            f = _new(findings, path, kind=Kind.SURVIVING_TENSORS)
            f.update(leak=True, confidence=0.6, bps=per, total=per * n,
                     fix=(f"something keeps the outputs of `{path}` alive from step to step: a forward hook or a "
                          f"container that stores them. Store `output.detach().cpu()` or a summary, clear it each "
                          f"step, or remove the hook; run with level=\"full\" to name the holder."))
            f["evidence"].append(ev)
    # forward memory of the module that owns a cached attribute
    for loc, f in findings.items():
        if f["kind"] == Kind.CACHED_TENSOR and "." in loc:
            owner = loc.rsplit(".", 1)[0]
            r = rows.get(owner)
            if r and r[1]:
                steps = max(1, last.get("steps", 1))
                f["evidence"].append(f"{owner} runs its forward {r[1] / steps:.0f} time(s) per step, "
                                     f"allocating {fmt_bytes(r[2])} per step")
