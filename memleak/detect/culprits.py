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
- ``modules``: per-module outputs still alive steps later, forward deltas, and modules that
  gain registered submodules or parameters step after step (registered).

Each cause gives one finding per location; suspects.rank merges findings with
the same location. Here ``detect`` runs the causes in turn over one table of
entries (culprit_table): holder_growth, survivors (births), saved_graphs,
registered and module_outputs; culprit_fixes words the fixes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records import HoldersRecord
from ..run import Run
from ..schema import Boundary, Finding, Kind
from . import process_held
from .alloc_sites import site_findings
from .bounded import filling_bounded
from .culprit_fixes import fed_chain_fix
from .culprit_table import Entries, keeps_graphs, merge_siblings
from .graphs import linked_counts
from .holder_growth import buffer_findings, holder_findings
from .module_outputs import module_evidence
from .object_holders import object_findings
from .registered import registered_findings
from .saturating import saturating_holders
from .saved_graphs import attach_saved, saved_growth
from .survivors import birth_findings

NAME = "culprits"


def detect(run: Run) -> list[Finding]:
    holders = run.holders
    findings: Entries = {}
    hkinds = _holder_kinds(holders)
    # holders whose graph is built on what they held a sample before: they carry the chain (graphs.py)
    carried = linked_counts(holders)
    saved_info = saved_growth(run.saved)
    # order matters: survivors and saved graphs credit the holders' entries made before them
    holder_findings(holders, hkinds, saved_info, findings, carried)
    buffer_findings(holders, findings)
    registered_findings(run.module_records, findings)
    birth_findings(run.births, holders, hkinds, findings, _full_collections(run))
    if saved_info is not None:
        attach_saved(saved_info, findings, hkinds)
    _cap_uncarried_chains(findings, carried)
    module_evidence(run.module_records, findings)
    object_findings(run, holders, hkinds, findings)  # Python data, once the tensors' causes are known
    site_findings(run, holders, findings)  # lines whose allocations grow where no holder was named
    process_held.name_held(run, findings, hkinds)
    process_held.registry_fixes(findings)
    _spare_bounded(holders, findings, run.capacity_bytes())
    if run.meta.get("gc_enabled") is False:
        _collector_off(findings, hkinds)
    if _forward_only(run):
        _no_backward(findings)
    merge_siblings(findings)
    _point_at_stores(holders, findings)
    return [_finding(loc, f) for loc, f in findings.items()]


def _holder_kinds(holders: Sequence[HoldersRecord]) -> dict[str, str]:
    """Holder kinds (module_attr, closure, ...), as the walk named them first; a chain is one from
    the walk that first met two links of it (a single node is an object like any other)."""
    hkinds: dict[str, str] = {}
    for r in holders:
        for row in r.holders:
            if row.kind == "chain":
                hkinds[row.holder] = row.kind
            else:
                hkinds.setdefault(row.holder, row.kind)
    return hkinds


def _forward_only(run: Run) -> bool:
    """Whether the run's iterations ended at calls of the model: no optimizer step and no backward
    pass was ever seen (inference, an evaluation loop)."""
    kinds = [e.get("kind") for e in run.events if e.get("event") == "boundary"]
    return bool(kinds) and kinds[-1] == Boundary.FORWARD.value


def _no_backward(findings: Entries) -> None:
    """A loop that never runs backward keeps graphs only because it builds them: no_grad is the fix."""
    for loc, f in findings.items():
        if f.get("leak") and f.get("kind") == Kind.RETAINED_GRAPH:
            f["fix"] = (
                f"`{loc}` keeps tensors with their autograd graphs in a loop that never runs backward "
                "(inference or evaluation): run it under `torch.no_grad()` or `torch.inference_mode()`, "
                "which builds no graph at all, or keep `.detach()`ed copies."
            )


def _collector_off(findings: Entries, hkinds: dict[str, str]) -> None:
    """The program turned Python's cyclic collector off (``gc.disable()``): surviving tensors that no
    root of the walk reaches (named by what refers to them, or where they were made) are most likely
    in reference cycles, which only a collection frees; the fix says so."""
    for loc, f in findings.items():
        if f.get("leak") and f.get("kind") == Kind.SURVIVING_TENSORS and loc not in hkinds:
            f["evidence"].append(
                "the program runs with Python's cyclic garbage collector off (gc.disable()), and no variable, "
                "attribute or container reaches these tensors: the mark of reference cycles only a collection frees"
            )
            f["fix"] = (
                f"`{loc}` is most likely in reference cycles: with the collector off (`gc.disable()`), an object "
                "in a cycle (a parent or back link, a callback that refers to its owner) is never freed. Break the "
                "cycle (a `weakref` for the back link, or drop the link when done), or call `gc.collect()` every few "
                "steps."
            )


def _point_at_stores(holders: Sequence[HoldersRecord], findings: Entries) -> None:
    """Name the user's line that stores into each leaking holder (the `append`, the `+=`): the fix
    goes there, not where the tensor was computed (often a model's forward)."""
    stored: dict[str, str] = {}
    for r in holders:  # by step: the latest line the walk found wins
        for row in r.holders:
            if row.stored:
                stored[row.holder] = row.stored
    for loc, f in findings.items():
        line = stored.get(loc)
        if line is None or not f.get("leak"):
            continue
        f["evidence"].insert(1, f"{loc} is filled at {line}, the line in your code that stores into it")
        f["data"]["stored"] = line
        if f.get("fix"):
            f["fix"] = f"At {line}: {f['fix']}"


def _spare_bounded(holders: Sequence[HoldersRecord], findings: Entries, memory: float | None) -> None:
    """A holder that grows only as a bounded container fills up (a ``deque(maxlen=...)`` window),
    or as a cache fills with the keys of a fixed set (saturating.py), stops at its bound: no leak,
    whatever its count did so far."""
    filling = {**saturating_holders(holders), **filling_bounded(holders, memory)}
    for loc, why in filling.items():
        f = findings.get(loc)
        if f is not None and f.get("leak"):
            f["leak"] = False
            f["evidence"].append(why)
            f["data"] = {**f["data"], "filling": True}  # the growth it explains stops at its bound (suspects.rank)
            f["fix"] = f"None needed: {loc} stops growing at its bound (lower it if it holds too much once full)."


def _cap_uncarried_chains(findings: Entries, carried) -> None:
    """A chained graph that is not carried into the next step only hangs off the carried one, or
    off the tensors a growing container keeps (``avg = sum(losses) / len(losses)`` each step: the
    graph of `avg` grows with `losses`, never built on the `avg` before)."""
    # holders gaining tensors that carry their graphs
    feeders = sorted(loc for loc, f in findings.items() if f.get("data", {}).get("count_grows") and keeps_graphs(f))
    for loc, f in findings.items():
        data = f.get("data", {})
        if not data.get("chained") or loc in carried:
            continue
        if carried:
            f["confidence"] = min(f["confidence"], 0.7)
        elif feeders and not data.get("capped"):
            f["confidence"] = min(f["confidence"], 0.7)
            f["evidence"].append(_fed_by(loc, feeders))
            f["fix"] = fed_chain_fix(loc, feeders)


def _fed_by(loc: str, feeders: list[str]) -> str:
    return (
        f"no sampled step's graph of {loc} reached the one {loc} held at the step before: it is not built on "
        f"its previous value but computed from tensors that {_names(feeders)} keep(s) gaining, and grows with them"
    )


def _names(locs: list[str]) -> str:
    return ", ".join(locs[:3]) + (f" and {len(locs) - 3} more" if len(locs) > 3 else "")


def _finding(loc: str, f: dict) -> Finding:
    return Finding(
        detector=NAME,
        kind=f["kind"],
        location=loc,
        bytes_per_step=float(f["bps"]),
        total_bytes=float(f["total"]),
        confidence=float(min(0.99, f["confidence"])),
        evidence=tuple(f["evidence"]),
        fix=f["fix"],
        leak=bool(f["leak"]),
        data=f.get("data", {}),
    )


def _full_collections(run: Run) -> list[int] | None:
    """The steps in which the cyclic collector ran a full collection (RuntimeProbe's
    `gc_collections`), or None where the run does not say."""
    if "gc_collections" not in run.steps:
        return None
    counts = run.steps[["step", "gc_collections"]].dropna()
    rose = counts["gc_collections"].diff() > 0
    return [int(s) for s in counts["step"][rose]]
