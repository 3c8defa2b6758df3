"""Holders of plain Python data that grow with host memory: a list that keeps ``out.tolist()``
every step, a dict of decoded strings or per-sample results, kept for the whole run.

Such a holder keeps no tensor, so no tensor count sees it; the walk sizes it (`HolderRow.objects`,
`obj_bytes`: probes/pydata.py). Python's small objects live in pymalloc arenas that are mapped
apart from the C heap, so the growth shows in RSS far more than in ``heap_bytes``.

The bar, two witnesses and a floor: the holder's estimated bytes rise steadily over the sampled
steps by MIN_DATA_BPS a step at least, and a host series (heap or RSS) grows on its own trend
test, by a rate the holder accounts for a good part of (HOST_SHARE). A list of one float or one
small dict of floats a step (``losses.append(loss.item())``, a trainer's log history) adds a few
hundred bytes a step: under the floor, and far too little to show in host memory. Because the
holder backs it, RSS is judged here at the share of its level any series needs (MIN_REL_GROWTH)
rather than the larger share it needs alone (RSS creeps benignly: thresholds.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records import HoldersRecord
from ..run import HOST_COLUMNS, Run
from ..schema import Kind
from ..units import fmt_bytes
from .culprit_table import Entries, entry
from .growth import Growth, analyze_growth
from .holder_growth import _WHERE, _col, _series
from .kept_fixes import jit_fix, queue_fix
from .sampled_trend import MIN_SAMPLES, sustained_rise
from .thresholds import MIN_DATA_BPS, MIN_REL_GROWTH, min_rel_growth

#: ... and at least this share of the fastest host series' growth per step (its size is estimated
#: from a few items: pymalloc's own overhead and objects shared between items make it approximate).
HOST_SHARE = 0.25
#: A holder that gains this much a step leaks even where host memory does not show it yet: the
#: process reuses memory it freed earlier (pymalloc keeps freed arenas for new objects), and a
#: steady 64 KiB a step is a gibibyte every 16k steps.
MIN_UNBACKED_BPS = 64 * 1024
#: ...as one buffer does that was larger at each of this many walks (`_grown_in_place`).
IN_PLACE_SAMPLES = 6


def host_growth(run: Run, min_rel: float | None = MIN_REL_GROWTH) -> Growth | None:
    """The fastest-growing host series (heap or RSS) that leaks at `min_rel` of its level (by
    default the share any series needs; None: each series on its own terms, RSS at the larger share
    it needs alone); None when host memory does not grow."""
    found = []
    for col in HOST_COLUMNS:
        if col in run.steps and run.steps[col].notna().sum() >= 2:
            g = analyze_growth(run, col, min_rel=min_rel)
            if g.leak and g.slope > 0:
                found.append(g)
    return max(found, key=lambda g: g.slope, default=None)


def object_findings(run: Run, holders: Sequence[HoldersRecord], hkinds: dict[str, str], findings: Entries) -> None:
    """An entry for each holder of Python data whose bytes grow with host memory (module doc)."""
    if len(holders) < MIN_SAMPLES:
        return
    steps, by = _series(holders)
    grown = {}
    for name, rows in by.items():
        if findings.get(name, {}).get("leak"):
            continue  # the tensors it holds are the cause found already
        vals = _col(rows, "obj_bytes")
        tr = sustained_rise(steps, vals, 2 * MIN_DATA_BPS, rel_rise=0.5)
        if tr is not None and tr["slope"] >= MIN_DATA_BPS:
            grown[name] = (tr, rows)
    if not grown:
        return
    # the holder's steady rise is one witness: the host series, the second, need only clear its
    # noise, not a share of its level (which depends on what else the process has imported)
    host = host_growth(run, min_rel=0.0)
    own = min_rel_growth(host.column) if host is not None else 0.0
    alone = own if host is not None and own > MIN_REL_GROWTH and not analyze_growth(run, host.column).leak else 0.0
    for name, (tr, rows) in grown.items():
        backed = host is not None and tr["slope"] >= HOST_SHARE * host.slope
        if backed or tr["slope"] >= MIN_UNBACKED_BPS or _grown_in_place(rows, hkinds.get(name) or ""):
            _entry(findings, name, hkinds.get(name) or "", steps, rows, tr, host if backed else None, alone)


def _entry(
    findings: Entries, name: str, hkind: str, steps: list[int], rows, tr: dict, host: Growth | None, alone: float
) -> None:
    """The entry for `name`, backed by the growing `host` series (None: by its own rate alone);
    `alone`: the share of its level the host series would need on its own, when it grew by less."""
    objects, nbytes = _col(rows, "objects"), _col(rows, "obj_bytes")
    buffer = _one_buffer(objects, hkind)
    where = _WHERE.get(hkind, "")
    if "." in name and hkind in ("local", "global"):
        where = "the attribute"
    what = f"{where + ' ' if where else ''}{name}"
    f = entry(findings, name, kind=Kind.PYTHON_OBJECTS)
    f.update(
        kind=Kind.PYTHON_OBJECTS,
        leak=True,
        confidence=max(f["confidence"], min(tr["confidence"], host.confidence + 0.3) if host else 0.6),
        bps=max(f["bps"], tr["slope"]),
        total=max(f["total"], nbytes[-1]),
        fix=_buffer_fix(name) if buffer else data_fix(name, hkind),
        data={
            **f["data"],
            "holder_kind": hkind,
            "python_objects": True,
            "host_column": host.column if host else None,
            "steps": steps,
            "objects": objects,
            "obj_bytes": nbytes,
        },
    )
    items = (
        "traced TorchScript functions (their graphs are host memory, ~3 KiB a node)"
        if hkind == "jit"
        else "Python objects (items of plain data: numbers, strings, bytes, lists or dicts of them; no tensor)"
    )
    if buffer:
        f["evidence"].append(
            f"{what} is one object of plain data (a string, bytes, a bytearray, BytesIO or array) of "
            f"{fmt_bytes(nbytes[-1])} at step "
            f"{steps[-1]}, up from {fmt_bytes(nbytes[0])} at step {steps[0]}: ~{fmt_bytes(tr['slope'])} per step"
        )
    else:
        f["evidence"].append(
            f"{what} holds {int(round(objects[-1]))} {items} of about {fmt_bytes(nbytes[-1])} at step {steps[-1]}, "
            f"up from {int(round(objects[0]))} at step {steps[0]}: ~{fmt_bytes(tr['slope'])} per step "
            f"(sizes estimated from the items at its ends)"
        )
    if host is None:
        f["evidence"].append(
            "host memory does not show it yet (the process reuses memory it freed earlier), but at this rate it must"
        )
        return
    f["evidence"].append(
        f"host memory grows with it: {host.column} {fmt_bytes(host.slope, signed=True)}/step over "
        f"{host.n_steps} steps after a warm-up of {host.warmup_steps}"
        + (
            f" (under the {alone:.0%} of its level {host.column} needs on its own: this holder backs it)"
            if alone
            else ""
        )
    )


def _grown_in_place(rows, hkind: str) -> bool:
    """One buffer (`_one_buffer`) larger at each of IN_PLACE_SAMPLES walks or more: it grows only by
    what is written to it, its size measured, not estimated, so it is its own witness where host
    memory does not show it (a StringIO's lines are small strings in pymalloc's arenas, which the
    process reuses)."""
    sizes = _col(rows, "obj_bytes")
    return (
        _one_buffer(_col(rows, "objects"), hkind)
        and len(sizes) >= IN_PLACE_SAMPLES
        and all(b > a for a, b in zip(sizes, sizes[1:], strict=False))
    )


def _one_buffer(objects, hkind: str) -> bool:
    """Whether a holder's plain data was one object at every walk (a buffer growing in place; not
    a traced function, whose graph is what grows)."""
    return hkind != "jit" and bool(len(objects)) and max(objects) <= 1


def _buffer_fix(holder: str) -> str:
    """What to do with one buffer of plain data that grows every step."""
    return (
        f"`{holder}` is one object that grows every step (`+=`, `.write()`, `.extend()`), all in host memory "
        f"for the whole run: write what it gathers to disk as it comes (a file, your logger) and empty it "
        f"(`{holder} = ''` for a string, `del {holder}[:]` for a bytearray, `seek(0)` and `truncate()` for a "
        f"BytesIO), or keep only what you need."
    )


def data_fix(holder: str, hkind: str) -> str:
    """What to keep instead of every step's Python objects, or how to bound or clear them."""
    return jit_fix(holder, hkind) or queue_fix(holder, hkind) or _objects_fix(holder, hkind)


def _objects_fix(holder: str, hkind: str) -> str:
    owner = ""
    if hkind == "closure":
        owner = " (a closure keeps it alive)"
    elif hkind == "default_arg":
        owner = " (a mutable default argument: one object shared by every call; default to None instead)"
    elif hkind == "module_attr":
        owner = " (an attribute of the model, which lives as long as the model)"
    return (
        f"`{holder}`{owner} gains Python objects every step (predictions kept with `.tolist()`, decoded "
        f"strings, dicts of per-sample results), all in host memory for the whole run: keep only what you "
        f"need (a number, or a running metric such as a sum and a count), write them to disk as they come "
        f"(a file, a CSV, your logger), bound it with `collections.deque(maxlen=...)`, or clear it at the "
        f"end of each epoch."
    )
