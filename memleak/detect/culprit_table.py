"""The culprits detector's working table: one entry per location, which every cause (a
growing holder, surviving cohorts, saved graphs, module outputs) adds its evidence to."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..holder_names import attribute_owner
from ..schema import Kind

#: location -> entry (kind, fix, evidence, data, leak, confidence, bps, total), made into a Finding at the end.
Entries = dict[str, dict[str, Any]]


def entry(findings: Entries, loc: str, **kw) -> dict:
    """The entry at `loc`; a new, empty one with the fields `kw` when there is none yet."""
    f = findings.get(loc)
    if f is None:
        f = findings[loc] = {
            "evidence": [],
            "data": {},
            "leak": False,
            "confidence": 0.0,
            "bps": 0.0,
            "total": 0.0,
            **kw,
        }
    return f


def merge_siblings(findings: Entries) -> None:
    """Attributes of one object that grow together (a metric's ``preds`` and ``target``) are one
    cause: the biggest keeps its location and takes the others' evidence. Tensors that carry their
    autograd graphs cost far more than their own bytes (suspects.py counts the graphs later), so
    one that keeps graphs comes before one that keeps only bytes (a loss beside an accuracy)."""
    by_parent: dict[str, list[str]] = defaultdict(list)
    for loc, f in findings.items():
        # entries of one container (a key with a dot in it too) are folded later (suspects._fold_entries)
        owner = attribute_owner(loc) if ":" not in loc else None
        if f.get("leak") and owner and f["kind"] in (Kind.SURVIVING_TENSORS, Kind.CACHED_TENSOR, Kind.PYTHON_OBJECTS):
            by_parent[owner].append(loc)
    for parent, locs in by_parent.items():
        if len(locs) < 2:
            continue
        locs.sort(key=lambda name: (not keeps_graphs(findings[name]), -findings[name]["bps"], name))
        keep = findings[locs[0]]
        for other in locs[1:]:
            f = findings.pop(other)
            keep["evidence"].append(f"{other}, another attribute of {parent}, grows with it:")
            keep["evidence"].extend(f["evidence"][:2])
            keep["bps"] += f["bps"]
            keep["total"] += f["total"]
            keep["confidence"] = max(keep["confidence"], f["confidence"])


def keeps_graphs(f: dict) -> bool:
    """Whether the entry's holder keeps tensors that carry a grad_fn."""
    grad = f.get("data", {}).get("grad")
    return bool(grad) and grad[-1] > 0
