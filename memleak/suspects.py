"""Merge findings into ranked suspects: one cause appears once, with all its evidence."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace

from .detect.new_shapes import per_shape_growth
from .detect.one_tensor import unconfirmed
from .detect.slow_records import as_record, slow_record
from .detect.thresholds import GRAD_FN_HOST_OVERHEAD, TENSOR_HOST_OVERHEAD
from .schema import HOST_COLUMNS, Finding, Kind, Suspect, finding_data
from .units import fmt_bytes, where_ranks

# How directly a kind names a culprit. A culprit that explains growth outranks
# the growth itself, which only says that memory grows.
SPECIFICITY = {
    Kind.RETAINED_GRAPH: 1.0,
    Kind.CACHED_TENSOR: 1.0,
    Kind.SURVIVING_TENSORS: 0.95,
    Kind.PYTHON_OBJECTS: 0.95,
    Kind.PROFILER: 0.95,
    Kind.NON_PYTORCH_MEMORY: 0.8,
    Kind.HOST_GROWTH: 0.75,
    Kind.FRAGMENTATION: 0.7,
    Kind.LINEAR_GROWTH: 0.6,
}


def merge(findings: list[Finding]) -> Suspect:
    """One suspect from findings about the same location."""
    best = max(findings, key=lambda f: (SPECIFICITY.get(f.kind, 0.5), f.confidence))
    miss = 1.0
    for f in findings:
        miss *= 1.0 - max(0.0, min(1.0, f.confidence))
    evidence = list(OrderedDict.fromkeys(e for f in sorted(findings, key=lambda f: f is not best) for e in f.evidence))
    return Suspect(
        kind=best.kind,
        location=best.location,
        bytes_per_step=max(f.bytes_per_step for f in findings),
        total_bytes=max(f.total_bytes for f in findings),
        confidence=round(1.0 - miss, 3),
        evidence=tuple(evidence),
        fix=best.fix,
        leak=any(f.leak for f in findings),
        detectors=tuple(OrderedDict.fromkeys(f.detector for f in findings)),
    )


#: Kinds that name what keeps memory alive; growth kinds only say that memory grows.
CULPRITS = (Kind.RETAINED_GRAPH, Kind.CACHED_TENSOR, Kind.SURVIVING_TENSORS, Kind.PYTHON_OBJECTS, Kind.PROFILER)
SYMPTOMS = (Kind.LINEAR_GROWTH,)
#: A symptom is explained when the culprits add at least this share of its growth per step
#: (a retained graph, or held tensors whose graphs grow, always explains it: autograd nodes and
#: saved tensors grow the heap beyond the tensor bytes counted).
EXPLAINED_SHARE = 0.5


#: A holder of one tensor grown in bytes alone ranks after a holder gaining tensors this much less sure.
LONE_MARGIN = 0.05


def score(s: Suspect) -> tuple:
    # a leaking culprit explains the growth it causes: it ranks above any generic growth suspect
    return (s.leak, s.leak and s.kind in CULPRITS, s.confidence * SPECIFICITY.get(s.kind, 0.5), s.total_bytes)


def rank(findings: list[Finding], measured_bps: float = 0.0, host_bps: float | None = None) -> list[Suspect]:
    """Suspects, most likely culprit first: leaks before other findings, named culprits before generic
    growth, then by specificity-weighted confidence, then by bytes. Growth that the culprits explain is
    no suspect of its own: it becomes the top culprit's evidence; a finding marked `note` none at all.
    `measured_bps`: the memory series' own slope, leak or not, which the held tensors' bytes are
    compared with to tell a retained graph from surviving tensors; `host_bps`: the host series' slope
    on a device run (what a holder in host memory is compared with; `measured_bps` when None)."""
    groups: OrderedDict[str, list[Finding]] = OrderedDict()
    host = measured_bps if host_bps is None else host_bps
    growing_model = [f.location for f in findings if f.leak and finding_data(f).get("holder_kind") == "registered"]
    for f in findings:
        if f.note:
            continue
        in_host = finding_data(f).get("host")
        groups.setdefault(f.location, []).append(unconfirmed(f, host if in_host else measured_bps, growing_model))
    stored = {f.location: f.data.get("stored", "") for f in findings if isinstance(f.data, dict)}
    order = _ranking(findings)
    entries: dict[str, list[str]] = {}  # a culprit -> the entries of its container folded into it
    growing = _growing_graphs(findings)
    merged = sorted((merge(g) for g in groups.values()), key=order, reverse=True)
    ranked = sorted(_slow_records(_fold_entries(merged, stored, entries, growing), findings), key=order, reverse=True)
    culprits = [s for s in ranked if s.leak and s.kind in CULPRITS]
    if not culprits:
        return _per_shape(_bounded_growth(ranked, findings, entries), findings)
    if not any(s.leak and s.kind in SYMPTOMS for s in ranked):
        ranked = [_as_graph(s, measured_bps, findings) if s is culprits[0] else s for s in ranked]
        return _graphs_below(ranked, culprits[0].location, measured_bps, growing)
    graphs = any(c.kind == Kind.RETAINED_GRAPH or c.location in growing for c in culprits)
    names = ", ".join(s.location for s in culprits[:3])
    folded: list[Suspect] = []
    out: list[Suspect] = []
    for s in ranked:
        explained_bps = sum(_adds(c, s, findings, entries) for c in culprits)
        if not (s.leak and s.kind in SYMPTOMS):
            out.append(s)
        elif graphs or explained_bps >= EXPLAINED_SHARE * s.bytes_per_step:
            folded.append(s)
        else:
            out.append(
                replace(
                    s,
                    evidence=(
                        *s.evidence,
                        f"only {_share(explained_bps, s.bytes_per_step)} of this "
                        f"growth is explained by {names}: look for a second cause",
                    ),
                    # its fix said no holder grows without bound: these do, and there may be another
                    fix=s.fix.replace("found no holder that grows", f"found no holder besides {names} that grows"),
                )
            )
    if folded:
        top = culprits[0]  # its size takes the symptom's where its own graphs grow (not another culprit's)
        own_graphs = top.kind == Kind.RETAINED_GRAPH or top.location in growing
        explained = _explained(top, folded, own_graphs, findings, entries)
        out = [explained if s is top else s for s in out]
    return _graphs_below(out, culprits[0].location, measured_bps, growing)


def _ranking(findings: list[Finding]) -> Callable[[Suspect], tuple]:
    """`score`, but a holder of one tensor grown in bytes alone after a holder gaining tensors about
    as sure (LONE_MARGIN): it is most likely made from it each step (`torch.stack(bank.entries)`),
    which is what to fix. The margin spans the detectors' confidences for one holder: the walk's
    series and the survivor checks' samples rate it 0.95 and 0.91."""
    lone = {f.location for f in findings if finding_data(f).get("bytes_only")}

    def order(s: Suspect) -> tuple:
        leak, culprit, weighted, *rest = score(s)
        return (leak, culprit, weighted - (LONE_MARGIN if s.location in lone else 0.0), *rest)

    return order


def _graphs_below(ranked: list[Suspect], top: str, measured_bps: float, growing: set[str]) -> list[Suspect]:
    """Leaking culprits below the `top` one whose tensors keep growing graphs (at `growing`) are
    retained graphs too (a list of 0-d losses beside a bigger leak): their size is what the memory's
    growth leaves after the other culprits', not their tensors' few bytes (the top one's is
    `_as_graph`'s)."""
    culprits = [s for s in ranked if s.leak and s.kind in CULPRITS]
    out = []
    for s in ranked:
        if s.location == top or not s.leak or s.kind not in _HELD_KINDS or s.location not in growing:
            out.append(s)
            continue
        rest = measured_bps - sum(c.bytes_per_step for c in culprits if c is not s)
        line = "its tensors keep their autograd graphs, which grow: the graphs are most of what it keeps"
        sized = _scaled(s, max(s.bytes_per_step, rest))
        out.append(replace(sized, kind=Kind.RETAINED_GRAPH, evidence=(*s.evidence, line)))
    return out


#: A holder that is one entry of a container: `ema.shadow['0.weight']` of `ema.shadow`.
_ENTRY = re.compile(r"^(.+)(\[[^\[\]]+\])$")
#: A holder that is an attribute of something: `0.weight.grad_history`.
_ATTR = re.compile(r"^.+(\.[A-Za-z_]\w*)$")


def _fold_entries(
    ranked: list[Suspect], stored: dict[str, str], entries: dict[str, list[str]], growing: set[str]
) -> list[Suspect]:
    """Leaking culprits of one kind stored by one line (`stored`: the line the culprit detector found
    for each location) that are entries of one container (each value of a dict recomputed from
    itself without detach, an EMA's shadow weights), or attributes of one name on several objects
    (``p.grad_history`` on every parameter), are one cause: folded into one of them, the others
    its evidence and their bytes its own (their locations into `entries`, by its): the first that keeps
    growing graphs (`growing`: an undetached loss among detached scalars, the one to fix), else the first."""
    groups: dict[tuple, list[Suspect]] = {}
    order: list[tuple | Suspect] = []  # suspects, and the key of each group where its first one ranks
    for s in ranked:
        key = _fold_key(s, stored.get(s.location, "")) if s.leak and s.kind in CULPRITS else None
        if key is None:
            order.append(s)
            continue
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(s)
    out = []
    for item in order:
        if isinstance(item, Suspect):
            out.append(item)
            continue
        members = groups[item]
        first = next((m for m in members if m.location in growing), members[0])
        others = [m for m in members if m is not first]
        if others:
            entries.setdefault(first.location, []).extend(o.location for o in others)
            first = _with_entries(first, item[0], others, stored.get(first.location, ""))
        out.append(first)
    return out


def _fold_key(s: Suspect, line: str) -> tuple | None:
    """(its container, or "" and its attribute's name, its kind, its line) if `s` folds with its likes."""
    if m := _ENTRY.match(s.location):
        return m.group(1), s.kind, line
    if line and (m := _ATTR.match(s.location)):  # an attribute name alone says little without its line
        return "", m.group(1), s.kind, line
    return None


def _with_entries(first: Suspect, container: str, others: list[Suspect], line: str) -> Suspect:
    if container:
        keys = ", ".join(o.location[len(container) :] for o in others[:4]) + (", ..." if len(others) > 4 else "")
        text = f"{len(others)} more entries of {container} leak the same way ({keys})"
    else:
        names = ", ".join(o.location for o in others[:4]) + (", ..." if len(others) > 4 else "")
        text = f"{len(others)} more holders filled at {line} leak the same way ({names})"
    return replace(
        first,
        evidence=(*first.evidence, f"{text}: one cause, their bytes counted here"),
        bytes_per_step=first.bytes_per_step + sum(o.bytes_per_step for o in others),
        total_bytes=first.total_bytes + sum(o.total_bytes for o in others),
        detectors=tuple(OrderedDict.fromkeys([*first.detectors, *(d for o in others for d in o.detectors)])),
    )


def _bounded_growth(ranked: list[Suspect], findings: list[Finding], entries: Mapping[str, list[str]]) -> list[Suspect]:
    """Growth explained by bounded containers still filling up (a replay memory short of its
    capacity: `detect/culprits._spare_bounded`) is no leak: it stops at their bound."""
    filling = {f.location for f in findings if finding_data(f).get("filling")}
    fill = [s for s in ranked if s.location in filling]
    if not fill:
        return ranked
    out = []
    adds: dict[str, float] = {}  # a filling culprit -> what it adds to the host series it explains
    for s in ranked:
        bps = sum(_adds(c, s, findings, entries) for c in fill)
        if s.leak and s.kind in SYMPTOMS and bps and bps >= EXPLAINED_SHARE * s.bytes_per_step:
            names = ", ".join(c.location for c in fill[:3])
            why = f"{names}, filling up to its bound, adds {fmt_bytes(bps)} of it per step: it stops there"
            # the generic advice (look for a running loss, a list without detach) would contradict it
            fix = f"None needed if this growth stops where {names} fills up; watch it past that point."
            s = replace(s, leak=False, evidence=(*s.evidence, why), fix=fix)
            if s.location in HOST_COLUMNS:
                # a filling holder's size on the host counts its tensors' objects too, as quoted above
                adds.update({c.location: _adds(c, s, findings, entries) for c in fill})
        out.append(s)
    return [_resized(s, adds[s.location]) if s.location in adds else s for s in out]


def _per_shape(ranked: list[Suspect], findings: list[Finding]) -> list[Suspect]:
    """Host growth that no culprit explains while the model's input keeps taking new shapes is
    no leak: native code keeps something per new shape (`detect/new_shapes.py`)."""
    why = {f.location: f.data["new_shapes"] for f in findings if finding_data(f).get("new_shapes")}
    return [per_shape_growth(s, why[s.location]) if s.leak and s.location in why else s for s in ranked]


def _slow_records(ranked: list[Suspect], findings: list[Finding]) -> list[Suspect]:
    """Holders gaining a small tensor every few steps (a per-epoch record) are no leak
    (`detect/slow_records.py`)."""
    data = {f.location: f.data for f in findings if "count" in finding_data(f)}
    out = []
    for s in ranked:
        why = slow_record(s, data[s.location]) if s.leak and s.location in data else None
        out.append(as_record(s, why) if why else s)
    return out


def _resized(s: Suspect, bps: float) -> Suspect:
    """`s` at `bps` bytes a step, where that is more than its own (positive) figure."""
    return _scaled(s, bps) if bps > s.bytes_per_step > 0 else s


def _scaled(s: Suspect, bps: float) -> Suspect:
    """`s` at `bps` bytes a step, its total scaled alike (kept where its own figure was none)."""
    total = s.total_bytes * bps / s.bytes_per_step if s.bytes_per_step > 0 else s.total_bytes
    return replace(s, bytes_per_step=bps, total_bytes=total)


def _explained(
    top: Suspect, folded: list[Suspect], graphs: bool, findings: list[Finding], entries: Mapping[str, list[str]]
) -> Suspect:
    """The top culprit with the growth it explains (`folded`) as its evidence, and as its size."""
    lines = tuple(
        f"the symptom it explains: {s.kind.value} of {s.location}" + (f" ({s.evidence[0]})" if s.evidence else "")
        for s in folded
    )
    detectors = tuple(OrderedDict.fromkeys([*top.detectors, *(d for s in folded for d in s.detectors)]))
    # the growth it explains is the culprit's own (a graph's nodes are not counted as tensor bytes)
    bps, total = top.bytes_per_step, top.total_bytes
    on_host = next((s for s in folded if s.location in HOST_COLUMNS), None)
    if on_host is not None:  # on the host, what each tensor it gains costs beyond its data is its growth too
        bps = max(bps, _adds(top, on_host, findings, entries))
        total = max(total, on_host.total_bytes * min(1.0, bps / max(on_host.bytes_per_step, 1.0)))
        if not graphs and bps >= SMALL_TENSORS * max(top.bytes_per_step, 1.0):
            lines += (
                f"its tensors are small ({fmt_bytes(top.bytes_per_step)} of data a step): each costs about "
                f"{fmt_bytes(TENSOR_HOST_OVERHEAD)} more of {on_host.location} (its Python object, TensorImpl and "
                f"storage), so together they grow it by {fmt_bytes(bps)} a step",
            )
    if graphs:
        bps = max([bps, *(s.bytes_per_step for s in folded)])
        total = max([total, *(s.total_bytes for s in folded)])
    explained = replace(top, evidence=(*top.evidence, *lines), detectors=detectors)
    return replace(_as_graph(explained, bps, findings), bytes_per_step=bps, total_bytes=total)


#: A culprit's tensors are said to be small where what they cost the host heap is this many times their data.
SMALL_TENSORS = 2.0


def _adds(culprit: Suspect, symptom: Suspect, findings: list[Finding], entries: Mapping[str, list[str]]) -> float:
    """What `culprit` adds per step to the series `symptom` grows on: its tensors' bytes, and on a
    host series (the C heap, RSS) what each tensor it gains costs there beyond its data, its own and
    that of the `entries` folded into it (`_fold_entries`)."""
    bps = max(0.0, culprit.bytes_per_step)
    if symptom.location not in HOST_COLUMNS:
        return bps
    locations = {culprit.location, *entries.get(culprit.location, ())}
    for f in findings:
        data = finding_data(f)
        count, steps, per_step = data.get("count"), data.get("steps"), data.get("per_step")
        if f.location in locations and count and steps and len(count) >= 2 and steps[-1] > steps[0]:
            locations.discard(f.location)
            span, grad = steps[-1] - steps[0], data.get("grad") or (0, 0)
            bps += TENSOR_HOST_OVERHEAD * max(0.0, (count[-1] - count[0]) / span)
            bps += GRAD_FN_HOST_OVERHEAD * max(0.0, (grad[-1] - grad[0]) / span)
        elif f.location in locations and per_step:  # tensors no name holds, counted per step they were made
            locations.discard(f.location)
            bps += TENSOR_HOST_OVERHEAD * per_step["tensors"] + GRAD_FN_HOST_OVERHEAD * per_step["grad_fns"]
    return bps


def _as_graph(top: Suspect, grown_bps: float, findings: list[Finding]) -> Suspect:
    """`top` as a retained graph when its tensors carry growing graphs and add under half of
    the `grown_bps` memory grows per step: what they keep is mostly their autograd graphs."""
    if not (
        top.kind in _HELD_KINDS and top.location in _growing_graphs(findings) and top.bytes_per_step < 0.5 * grown_bps
    ):
        return top
    line = (
        f"its tensors add {fmt_bytes(top.bytes_per_step)} per step of the {fmt_bytes(grown_bps)} memory grows: "
        "the rest is the autograd graphs they keep (the nodes and the tensors saved for backward)"
    )
    return replace(top, kind=Kind.RETAINED_GRAPH, evidence=(*top.evidence, line))


#: Kinds whose culprit is a retained graph where the graphs its tensors keep grow.
_HELD_KINDS = (Kind.SURVIVING_TENSORS, Kind.CACHED_TENSOR)


def _growing_graphs(findings: list[Finding]) -> set[str]:
    """Locations whose held tensors keep growing autograd graphs: their nodes and saved tensors
    grow the heap beyond the tensor bytes counted for them. Counted nodes that rise say so, and so
    do more tensors that carry a grad_fn (each brings its graph: a long container's graphs are
    counted at its ends only, so its node count may stay flat while they pile up)."""
    out = set()
    for f in findings:
        data = finding_data(f)
        made_with_graphs = (data.get("per_step") or {}).get("grad_fns", 0) > 0  # no name holds them: made each step
        if f.leak and (made_with_graphs or any(_rises(data.get(k)) for k in ("nodes", "grad"))):
            out.add(f.location)
    return out


def _rises(values) -> bool:
    return isinstance(values, (list, tuple)) and len(values) >= 2 and values[-1] > values[0]


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "none"


def rank_across(per_rank: dict[int, list[Suspect]]) -> list[Suspect]:
    """The suspects of every rank of a distributed run, ranked together: the same (kind,
    location) on several ranks is one suspect, its location prefixed with the ranks
    (``ranks 0-3: history``)."""
    groups: dict[tuple, list[tuple[int, Suspect]]] = {}
    for rank, suspects in per_rank.items():
        for s in suspects:
            groups.setdefault((s.kind, s.location), []).append((rank, s))
    merged: list[Suspect] = []
    for (kind, location), items in groups.items():
        ranks = [r for r, _ in items]
        best = max((s for _, s in items), key=lambda s: (s.leak, s.confidence, s.total_bytes))
        evidence = list(best.evidence)
        if len(ranks) > 1:
            evidence.insert(0, f"found on {where_ranks(ranks)}")
        merged.append(
            Suspect(
                kind=kind,
                location=f"{where_ranks(ranks)}: {location}",
                bytes_per_step=max(s.bytes_per_step for _, s in items),
                total_bytes=max(s.total_bytes for _, s in items),
                confidence=max(s.confidence for _, s in items),
                evidence=tuple(evidence),
                fix=best.fix,
                leak=any(s.leak for _, s in items),
                detectors=tuple(dict.fromkeys(d for _, s in items for d in s.detectors)),
            )
        )
    return sorted(merged, key=score, reverse=True)
