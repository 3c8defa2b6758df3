"""Holders that grow: per deep step, a named holder whose tensor count, bytes or autograd graph
keeps growing (the ``holders`` records), and registered buffers replaced by ever bigger tensors."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..holder_names import attribute_owner, is_traceback_note
from ..records import HolderRow, HoldersRecord
from ..schema import Kind
from ..units import fmt_bytes
from .culprit_fixes import (
    NODES_LOWER_BOUND,
    bare_graphs_fix,
    bounded_fix,
    culprit_fix,
    grown_tensor_fix,
    traceback_fix,
)
from .culprit_table import Entries, entry
from .keyed_holders import fold_keyed
from .refills import anew_growing, anew_words, refilled
from .sampled_trend import MIN_COUNT_RISE, MIN_SAMPLES, keeps_new_highs, late_rise, sustained_rise

#: Graph nodes a holder must gain before a growing graph counts.
MIN_NODE_RISE = 8

#: How the evidence names a holder of each kind the walk gives.
_WHERE = {
    "module_attr": "the module attribute",
    "metric_state": "the metric state",
    "param_attr": "the parameter attribute",
    "buffer": "the buffer",
    "closure": "the closure variable",
    "class_attr": "the class attribute",
    "global": "the global",
    "local": "the variable",
    "hook": "the hook object",
    "callback": "the callback list",
    "default_arg": "the default argument",
    "finalizer": "the weakref.finalize-kept",
    "lru_cache": "the lru_cache of",
    "piled_hook": "the hook-captured",
    "optimizer_attr": "the optimizer attribute",
    "optimizer_params": "the optimizer's",
    "optimizer_state": "the optimizers' state in",
    "optimizer_orphans": "the replaced parameters' state in",
    "optimizer_graph": "the graphs the optimizer's state carries in",
    "outside": "what is kept from outside Python by",
    "jit": "TorchScript's compilation unit, filled by",
    "thread": "the running",
}


@dataclass(frozen=True)
class _HolderSeries:
    """One holder's columns over the sampled deep steps, and the growth found in them."""

    steps: list[int]
    count: list[float]
    nbytes: list[float]
    grad: list[float]
    nodes: list[float]
    old: list[float]
    last: HolderRow  # the holder's latest row
    count_trend: dict | None
    bytes_trend: dict | None
    node_trend: dict | None
    cap_at: int | None  # the first sample whose graph hit the walk's node cap
    node_steps: list[int]  # the samples the graph is judged on (up to the cap)
    node_values: list[float]
    anew: bool = False  # filled anew every step, with more tensors each time (refills.anew_growing)
    ends: tuple[str, ...] = ()  # a lone tensor's first and last values, per sample (probes/fingerprint.py)


def holder_findings(holders: Sequence[HoldersRecord], hkinds, saved_info, findings: Entries, carried) -> None:
    """An entry for every holder whose count, bytes or graph grows over the sampled steps."""
    if len(holders) < MIN_SAMPLES:
        return
    steps, by = _series(holders)
    fold_keyed(steps, by)
    # whether the rows carry the tensors' ages: a walk counts the objects it visits, and records
    # made without one (hand-written, in tests) may leave `old` at zero
    aged = any(r.nodes_walked for r in holders) or any(row.old for r in holders for row in r.holders)
    for name, rows in by.items():
        h = _holder_series(steps, rows, aged)
        if h.count_trend or h.bytes_trend or h.node_trend:
            _holder_entry(findings, name, h, hkinds.get(name) or h.last.kind, saved_info is not None, carried)


def _holder_series(steps: list[int], rows: list[HolderRow | None], aged: bool = True) -> _HolderSeries:
    count, nbytes = _col(rows, "count"), _col(rows, "bytes")
    grad, nodes = _col(rows, "grad"), _col(rows, "nodes")
    # a capped graph count keeps growing past the cap
    cap_at = next((i for i, r in enumerate(rows) if r is not None and r.capped), None)
    nsteps, nvals = (steps, nodes) if cap_at is None else (steps[: cap_at + 1], nodes[: cap_at + 1])
    n_tr = sustained_rise(nsteps, nvals, MIN_NODE_RISE)
    if n_tr and not _spans_steps(rows):
        n_tr = None  # a bigger graph each step, built afresh (a growing curriculum), not one kept
    count_trend = sustained_rise(steps, count, MIN_COUNT_RISE)
    late = 0 if count_trend else late_rise(steps, count)  # a bounded sawtooth that stopped being emptied
    if late:
        count_trend = sustained_rise(steps[late:], count[late:], MIN_COUNT_RISE)
    if count_trend and n_tr is None and _aliases_only(nbytes, grad):
        count_trend = None  # more tensors but not one more byte: aliases of storage already held
    at = refilled(steps, count, _col(rows, "old"), _col(rows, "estimated")) if count_trend and aged else []
    anew = anew_growing(count, at)  # filled anew each step with ever more: it grows all the same
    start = at[-1] if at and not anew else late
    if start:  # emptied or replaced since the first sample: only the growth since counts (bytes too)
        count_trend = sustained_rise(steps[start:], count[start:], MIN_COUNT_RISE)
    bytes_trend = sustained_rise(steps[start:], nbytes[start:], 1024, rel_rise=0.5) if max(nbytes) > 0 else None
    if bytes_trend and not count_trend and not keeps_new_highs(steps, nbytes):
        bytes_trend = None  # as many tensors as before, of sizes that merely vary (random lengths)
    return _HolderSeries(
        steps=steps,
        count=count,
        nbytes=nbytes,
        grad=grad,
        nodes=nodes,
        old=_col(rows, "old"),
        last=next(r for r in reversed(rows) if r is not None),
        count_trend=count_trend,
        bytes_trend=bytes_trend,
        node_trend=n_tr,
        cap_at=cap_at,
        node_steps=nsteps,
        node_values=nvals,
        anew=anew,
        ends=tuple(r.ends if r is not None else "" for r in rows),
    )


def _aliases_only(nbytes: list[float], grad: list[float]) -> bool:
    """Every tensor the holder gained shares a storage it held already (``model.state_dict()``
    entries kept in a list, views of one tensor), and none carries a graph: no memory is added."""
    return max(nbytes) > 0 and nbytes[-1] <= nbytes[0] and max(grad) == 0


def _holder_kind(hkind: str, chained: bool, saved_growing: bool, h: _HolderSeries) -> Kind:
    if chained:
        return Kind.RETAINED_GRAPH
    # graphs that keep saved-for-backward tensors from earlier steps are the mechanism, whoever
    # holds them (a module attribute too): the fix is to detach, not to bound a cache
    if saved_growing and (h.count_trend or h.node_trend):
        return Kind.RETAINED_GRAPH
    if hkind in ("module_attr", "buffer"):
        return Kind.CACHED_TENSOR
    return Kind.SURVIVING_TENSORS


def _holder_entry(findings: Entries, name: str, h: _HolderSeries, hkind: str, saved: bool, carried) -> None:
    """The entry for the growing holder `name`: its kind, fix, size and evidence."""
    has_grad = h.grad[-1] > 0
    # the graph grows but not the count: each step's graph is built on the previous one (unless
    # what grows is graphs kept without their tensors, `grad_fn`s side by side)
    chained = h.node_trend is not None and h.count_trend is None and not _bare_graphs(h)
    saved_growing = saved and has_grad
    kind = _holder_kind(hkind, chained, saved_growing, h)
    steps, nbytes = h.steps, h.nbytes
    bps = (h.bytes_trend["slope"] if h.bytes_trend else 0.0) or (nbytes[-1] - nbytes[0]) / max(1, steps[-1] - steps[0])
    trends = (h.count_trend, h.bytes_trend, h.node_trend)
    same = (h.old[-1] > 0) if chained else None  # the graph grows on one object kept (a running sum)
    f = entry(findings, name, kind=kind)
    f.update(
        kind=kind,
        leak=True,
        confidence=max(f["confidence"], max(t["confidence"] for t in trends if t)),
        bps=max(f["bps"], bps),
        total=max(f["total"], nbytes[-1]),
        fix=culprit_fix(kind, name, hkind, chained, has_grad, saved_growing, same_object=same, arrays=_arrays(h.last)),
        data={
            **f["data"],
            "holder_kind": hkind,
            "steps": steps,
            "count": h.count,
            "grad": h.grad,  # of them carrying a grad_fn (their nodes cost the host more: suspects._adds)
            "bytes": nbytes,
            "nodes": h.nodes,
            "chained": chained,
            "carried": name in carried,
            "count_grows": h.count_trend is not None,
            "capped": h.cap_at is not None,  # its graph walk hit the node cap: a link may lie past it
            "bytes_only": not (h.count_trend or h.node_trend) and h.old[-1] == 0,  # one fresh tensor, larger
            "ends": h.ends,  # ...and whether its values carry over from one sample to the next (one_tensor.py)
            # held in host memory on a device run (numpy arrays, CPU copies): the host series shows it
            "host": h.last.host_bytes >= 0.5 * h.last.bytes > 0,
            "traceback": is_traceback_note(h.last.note),  # its fix stays the exception's (saved_graphs)
        },
    )
    if h.node_trend:  # the rate the evidence gives, for the plots (the series runs past the walk's cap)
        f["data"]["nodes_per_step"] = h.node_trend["slope"]
    f["evidence"].extend(_growth_evidence(name, hkind, h, bps))
    if chained and carried:
        if name in carried:  # the graphs detector gives the evidence
            f["confidence"] = max(f["confidence"], 0.95)
        else:
            others = ", ".join(sorted(carried)[:3])
            f["evidence"].append(f"its graph includes the chain carried from step to step by {others}")
    f["evidence"].extend(_graph_evidence(name, h, chained, has_grad))
    f["evidence"].extend(_row_notes(h.last))
    f["fix"] = _shaped_fix(name, h, hkind, chained, has_grad, f["data"]["bytes_only"]) or f["fix"]
    if h.anew:
        why, f["fix"] = anew_words(name)
        f["evidence"].append(why)
    if _mostly_views(h.last) and hkind != "hook":  # a hook object's tensors are not the user's to copy
        f["fix"] += (
            " Its tensors are small views (`t[0]`, `t[:, i]`, `t.view(...)`) that each keep their whole base "
            "tensor alive: store a copy of the part you need (`t[0].clone()`, or `.detach().clone()`); "
            "`.extend(t)` and `+= t` on a list store one view per row: `.extend(t.tolist())` stores numbers."
        )


def _shaped_fix(name: str, h: _HolderSeries, hkind: str, chained: bool, has_grad: bool, bytes_only: bool) -> str:
    """The fix the holder's shape calls for, where its kind's does not fit ('' to keep that one): a
    bounded container, one tensor grown by concatenation, exceptions kept with their tracebacks,
    graph objects kept without tensors."""
    if h.last.capacity and not (chained or has_grad):
        return bounded_fix(name, h.last.capacity, h.last.bytes / max(1, h.last.length))
    if bytes_only and not chained and h.last.count <= 2:
        return grown_tensor_fix(name, has_grad)
    if fix := traceback_fix(name, h.last.note):  # caught exceptions kept, with their frames' locals
        return fix
    return bare_graphs_fix(name) if _bare_graphs(h) else ""


def _arrays(last: HolderRow) -> str:
    """`own` when most of what the holder keeps are numpy arrays with their own memory, `images`
    when most are images with native pixel memory (PIL), `shared` when most are tensors reached
    through arrays that share their memory, else an empty string."""
    if last.count <= 0:  # graphs kept without a tensor (autograd ctx objects): no arrays either
        return ""
    if last.images >= 0.5 * last.count:
        return "images"
    if last.np_arrays >= 0.5 * last.count:
        return "own"
    return "shared" if last.arrays >= 0.5 * last.count else ""


#: What a holder keeps, by `_arrays`, where it is not tensors.
_NOUNS = {"own": "numpy array", "images": "image"}


def _mostly_views(last: HolderRow) -> bool:
    return bool(last.views) and last.views >= 0.5 * max(1.0, last.count)


def _growth_evidence(name: str, hkind: str, h: _HolderSeries, bps: float) -> list[str]:
    """How the holder's tensor count (else its bytes) grew, in words."""
    where = _WHERE.get(hkind, "")
    if hkind in ("local", "global") and (attribute_owner(name) or name.endswith("]")):
        where = "the entry" if name.endswith("]") else "the attribute"  # a key may hold a dot
    what = f"{where + ' ' if where else ''}{name}"
    steps, count, nbytes = h.steps, h.count, h.nbytes
    noun = _NOUNS.get(_arrays(h.last), "tensor")
    size = fmt_bytes(nbytes[-1])
    if h.count_trend:
        return [
            f"{what} holds {_count_words(count[-1], noun)} ({size} in all) at step {steps[-1]}, "
            f"up from {int(round(count[0]))} at step {steps[0]} ({_per_step(h.count_trend['slope'])}, "
            f"{fmt_bytes(bps)} per step){_old_words(h.old[-1], count[-1])}"
        ]
    if h.bytes_trend:
        return [
            f"{what} grows from {fmt_bytes(nbytes[0])} at step {steps[0]} to {size} "
            f"at step {steps[-1]} ({fmt_bytes(bps)} per step) while holding {_count_words(count[-1], noun)}"
        ]
    return []


def _bare_graphs(h: _HolderSeries) -> bool:
    """The holder keeps more and more autograd nodes and no tensor (``fns.append(loss.grad_fn)``)."""
    return h.count[-1] == 0 and h.grad[-1] > h.grad[0]


def _graph_evidence(name: str, h: _HolderSeries, chained: bool, has_grad: bool) -> list[str]:
    """How the autograd graph the holder reaches grew, or that its tensors carry graphs at all."""
    if h.node_trend:
        capped = NODES_LOWER_BOUND if h.cap_at is not None else ""
        return [
            f"the autograd graph reachable from {name} grows from {int(h.nodes[0])} to {int(max(h.node_values))} "
            f"nodes{capped} between steps {h.steps[0]} and {h.node_steps[-1]} "
            f"(+{h.node_trend['slope']:.1f} nodes per step): "
            + (
                "each step's graph is chained to the previous one"
                if chained
                else f"it keeps {int(round(h.grad[-1]))} graphs by their nodes (grad_fn), each with what it saved"
                if _bare_graphs(h)
                else "each held tensor keeps its graph"
            )
        ]
    if has_grad:
        return [f"{int(round(h.grad[-1]))} of its tensors carry a grad_fn (their autograd graphs stay alive)"]
    return []


def _row_notes(last: HolderRow) -> list[str]:
    """What the walk noted about the holder's latest row: host memory, estimates, its own note."""
    notes = []
    if last.host_bytes:
        notes.append(
            f"{fmt_bytes(last.host_bytes)} of it is in host memory (tensors on another device than the tracked one)"
        )
    if last.note:
        notes.append(last.note)
    if last.arrays:
        notes.append(
            f"{_count_words(last.arrays)} it holds are reached through numpy arrays (or memoryviews) that share "
            f"their memory: `.numpy()` of a CPU tensor copies nothing, so each array keeps its tensor's storage alive"
        )
    if last.views:
        notes.append(
            f"{_count_words(last.views)} it holds are views of larger tensors: each keeps its whole base in memory"
        )
    if last.estimated:
        notes.append("counts of long containers are estimated from their first and last elements")
    return notes


def buffer_findings(holders: Sequence[HoldersRecord], findings: Entries) -> None:
    """An entry for every registered buffer whose bytes grow: replaced by a bigger tensor each step."""
    if len(holders) < MIN_SAMPLES:
        return
    steps = [r.step for r in holders]
    paths = {p for r in holders for p in r.buffers}
    for p in paths:
        vals = [float((r.buffers.get(p) or [0, 0])[1]) for r in holders]
        tr = sustained_rise(steps, vals, 1024, rel_rise=0.2)
        if tr is None or not keeps_new_highs(steps, vals):  # one tensor whose size merely varies
            continue
        f = entry(findings, p, kind=Kind.CACHED_TENSOR)
        f.update(
            kind=Kind.CACHED_TENSOR,
            leak=True,
            confidence=max(f["confidence"], tr["confidence"]),
            bps=max(f["bps"], tr["slope"]),
            total=max(f["total"], vals[-1]),
            fix=(
                f"the registered buffer `{p}` grows (it is replaced by a larger tensor every step): keep "
                f"buffers a fixed size (preallocate and write in place, or keep a bounded window)."
            ),
        )
        f["evidence"].append(
            f"the registered buffer {p} grows from {fmt_bytes(vals[0])} at step {steps[0]} to "
            f"{fmt_bytes(vals[-1])} at step {steps[-1]} ({fmt_bytes(tr['slope'])} per step)"
        )


# ---------------------------------------------------------------- series of the holders records


def _series(records: Sequence[HoldersRecord]) -> tuple[list[int], dict[str, list[HolderRow | None]]]:
    """The sampled steps, and per holder its row at each (None where the walk did not name it)."""
    steps = [r.step for r in records]
    by: dict[str, list[HolderRow | None]] = defaultdict(lambda: [None] * len(records))
    for i, r in enumerate(records):
        for row in r.holders:
            by[row.holder][i] = row
    return steps, dict(by)


def _col(rows: list[HolderRow | None], column: str) -> list[float]:
    """One numeric column of a holder's rows (0 where the walk did not name it)."""
    return [float(getattr(r, column) or 0) if r is not None else 0.0 for r in rows]


def _spans_steps(rows: list[HolderRow | None]) -> bool:
    """Whether the holder's graph keeps nodes from one sample to the next: its oldest node is older
    than the newest node of the previous sample's graph (node sequence numbers grow as nodes are
    created). Without sequence numbers (older records) assume it does."""
    seqs = [r.seq if r is not None else None for r in rows]
    if not any(seqs):
        return True
    pairs = [(a, b) for a, b in zip(seqs, seqs[1:], strict=False) if a and b]
    return any(b[0] <= a[1] for a, b in pairs) or any(r is not None and r.capped for r in rows)


def _count_words(n: float, noun: str = "tensor") -> str:
    n = int(round(n))
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _per_step(x: float) -> str:
    if x >= 0.95 and abs(x - round(x)) < 0.15:
        r = int(round(x))
        return "one more each step" if r == 1 else f"{r} more each step"
    if x >= 0.05:
        return f"one more every {1 / x:.0f} steps" if x < 0.65 else f"{x:.1f} more each step"
    return "slowly more"


def _old_words(old: float, count: float) -> str:
    """Held items known to be two or more steps old: a lower bound (an age counts from the walk that first saw it)."""
    n = int(round(old))
    return f"; {'all' if n >= round(count) else 'at least'} {n} of them are two or more steps old" if n > 0 else ""
