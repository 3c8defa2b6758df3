"""The holders the pictures draw and each one's line over steps.

A holder is drawn from the reference walks that found it. A holder that only the survivor checks
named (tensors born on a sampled step still alive, held by a generator's local the walk never
reaches: probes/survivors.py) is drawn from those checks instead: what it keeps of the tensors
born on the sampled steps, a lower bound of all it keeps, which its label says (`SAMPLED`).
"""

from __future__ import annotations

import pandas as pd

from ..holder_names import family_name

#: Holders named in the pictures at most.
TOP_HOLDERS = 6
#: What a survivor-named holder's label adds: its line counts the sampled steps' tensors alone.
SAMPLED = " (born on sampled steps)"
COLUMNS = ["step", "bytes", "count", "nodes", "capped"]


def top_holders(run, suspects=(), n: int = TOP_HOLDERS) -> list[str]:
    """The holders worth drawing: those a suspect names first (walked or named by the survivor
    checks), then the most bytes ever held at a walk."""
    peak: dict[str, float] = {}
    for rec in getattr(run, "holders", []):
        for h in rec.holders:
            if h.holder:
                peak[h.holder] = max(peak.get(h.holder, 0.0), float(h.bytes))
    # a holder made one per step is drawn once, in its family (`heads.task*.weight`), not also as
    # each of the first few members the walks saw before the family was big enough to fold
    peak = {k: v for k, v in peak.items() if family_name(k) not in peak}
    survived = survivor_holders(run)
    named = [s.location for s in suspects or () if s.location in peak or s.location in survived]
    rest = sorted((k for k in peak if k not in named), key=lambda k: -peak[k])
    return list(dict.fromkeys([*named, *rest]))[:n]


def survivor_holders(run) -> set[str]:
    """The holders the survivor checks named and no walk found."""
    walked = {h.holder for rec in getattr(run, "holders", []) for h in rec.holders}
    return {c.holder for rec in getattr(run, "births", []) for c in rec.cohorts if c.holder} - walked


def holder_series(run, names: list[str], births: bool = True) -> dict[str, pd.DataFrame]:
    """Each named holder over the walks: a table of step, bytes and count (its tensors' and its
    plain Python data's: a queue of bytes, a list of floats), nodes (0 on a walk that did not find
    it) and capped (1 where the node count stopped at its cap: a lower bound). With `births`, a
    holder only the survivor checks named is over those checks (`survivor_series`); without, such
    a holder has no table."""
    records = getattr(run, "holders", [])
    survived = survivor_holders(run)
    out: dict[str, pd.DataFrame] = {}
    for name in names:
        if name in survived:
            if births:
                out[name] = survivor_series(run, name)
            continue
        rows = []
        for rec in records:
            h = next((h for h in rec.holders if h.holder == name), None)
            held = (h.held_bytes, h.count + h.objects) if h is not None else (0, 0)
            rows.append((rec.step, 0, 0, 0, 0) if h is None else (rec.step, *held, h.nodes, h.capped))
        out[name] = pd.DataFrame(rows, columns=COLUMNS, dtype=float)
    return out


def survivor_series(run, name: str) -> pd.DataFrame:
    """What `name` keeps of the tensors born on sampled steps, at each survivor check (the one
    after the loop's end too): their bytes and count; no node count (NaN: not measured). Marked
    ``sampled`` in its attrs (`note`)."""
    rows = []
    for rec in getattr(run, "births", []):
        kept = [c for c in rec.cohorts if c.holder == name]
        rows.append((rec.step, sum(c.bytes for c in kept), sum(c.count for c in kept), float("nan"), 0))
    table = pd.DataFrame(rows, columns=COLUMNS, dtype=float)
    table.attrs["sampled"] = True
    return table


def note(table: pd.DataFrame) -> str:
    """What a holder's label adds in the holder pictures: `SAMPLED` for a survivor-named one's line."""
    return SAMPLED if table.attrs.get("sampled") else ""


def title(tables: dict[str, pd.DataFrame]) -> str:
    """The holder pictures' title: the survivor checks too where a drawn holder's line is theirs."""
    checks = " or survivor check" if any(note(t) for t in tables.values()) else ""
    return f"what each top holder keeps, at each reference walk{checks}"


def count_label(run, names: list[str]) -> str:
    """The count axis' label: tensors, and numpy arrays, images and Python objects where a named holder keeps them."""
    rows = [h for rec in getattr(run, "holders", []) for h in rec.holders if h.holder in names]
    kept = {"numpy arrays": "np_arrays", "images": "images", "Python objects": "objects"}
    kinds = ["tensors"] + [what for what, field in kept.items() if any(getattr(h, field) for h in rows)]
    return " and ".join(kinds) if len(kinds) < 3 else ", ".join(kinds[:-1]) + " and " + kinds[-1]


NODES_CAPPED = "autograd nodes\n(hollow: a lower bound)"


def nodes_label(tables: dict[str, pd.DataFrame]) -> str:
    """The node axis's label: it says so when some counts are lower bounds."""
    return NODES_CAPPED if any(t["capped"].any() for t in tables.values()) else "autograd nodes"
