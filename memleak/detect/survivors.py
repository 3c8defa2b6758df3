"""Surviving tensors: birth cohorts (tensors created on an earlier deep step, by creation site
and holder) that stay alive, because they accumulate or because only Python's cyclic garbage
collector frees them (a reference cycle through autograd, a closure, a ctx)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..holder_names import is_thread_local
from ..records import BirthCohort, BirthsRecord, HoldersRecord
from ..schema import Kind
from ..units import fmt_bytes
from . import cycles
from .culprit_fixes import culprit_fix
from .culprit_table import Entries, entry
from .sampled_trend import MIN_COUNT_RISE, decelerated, plateaued

#: Share of the checked deep steps whose tensors must still be alive for a site to accumulate.
MIN_SURVIVING_SHARE = 0.6
MIN_COHORTS = 3

#: A group of cohorts: (creation site, holder); the holder is "" when the walk reached none.
Key = tuple[str, str]
#: Per group, its cohorts by the step they were born on.
Groups = dict[Key, dict[int, BirthCohort]]
#: Per group freed at once by the cyclic collector: (most sampled steps freed, step after, times).
Collected = dict[Key, tuple[int, int, int]]


@dataclass(frozen=True)
class _Births:
    """The births records with their cohorts grouped, and the deep steps they are judged on."""

    records: Sequence[BirthsRecord]
    groups: list[Groups]  # one per record
    deep: list[int]  # the sampled deep steps
    holders: Sequence[HoldersRecord]  # the walks, for the counts of the holders named

    def eligible_at(self, step: int) -> list[int]:
        """The last deep steps at least two steps before `step`, whose tensors should be gone by then."""
        return [d for d in self.deep if d <= step - 2][-12:]

    @property
    def step(self) -> int:
        """The step of the last record, which the survivors are judged at."""
        return self.records[-1].step

    @property
    def eligible(self) -> list[int]:
        return self.eligible_at(self.step)


@dataclass(frozen=True)
class _Group:
    """One (site, holder) group's survivors at the last record, and why they count."""

    site: str
    holder: str
    alive: list[int]  # eligible birth steps whose tensors are still alive
    accumulating: bool
    gc_freed: bool  # freed all at once by the cyclic collector, at least once
    marked_only: bool  # counts only for the probe's cycle mark: cyclic garbage made every step
    cohorts: dict[int, BirthCohort]  # the cohorts the evidence describes
    ended: int | None = None  # all freed by the check after the loop's last step (at this step)

    @property
    def key(self) -> Key:
        return (self.site, self.holder)


def birth_findings(
    births: Sequence[BirthsRecord], holders: Sequence[HoldersRecord], hkinds, findings: Entries, collected_at=None
) -> None:
    """An entry for each (site, holder) whose tensors accumulate or only the cyclic collector frees;
    `collected_at`: the steps a full collection ran in (None: not recorded, any mass death may be one)."""
    if not births:
        return
    deep = sorted({r.step for r in holders}) or sorted({c.born for r in births for c in r.cohorts})
    b = _Births(births, [_alive_by_key(r) for r in births], deep, holders)
    cyclic = _collected_cycles(b, hkinds, collected_at)
    marked = _cycle_marked(b.groups)
    # in one order whatever the hashing: the groups a cycle marks first (tensors no name holds that
    # the cycle's graph keeps join its entry, not an entry of their own)
    for key in sorted(set(b.groups[-1]) | set(cyclic) | set(marked), key=lambda k: (k not in marked, k)):
        group = _group(b, key, cyclic, marked)
        if group is not None:
            _survivor_entry(findings, b, group, cyclic, hkinds)
    for before, group in _ended_with_loop(b, {*cyclic, *marked}):
        _survivor_entry(findings, before, group, {}, hkinds)


def _ended_with_loop(b: _Births, judged: set[Key]) -> list[tuple[_Births, _Group]]:
    """Groups that accumulated until the last check in the loop and of which nothing is alive at the
    check after its last step (level auto's, `BirthsRecord.final`): the loop's own scope held them (a
    generator it iterated, a local of a function it ran), so they pile up for as long as it runs. A
    bounded buffer lets go of its oldest tensors only, and keeps the newest; these are judged at the
    check before, as a level that samples the last step judges them."""
    if len(b.records) < 2 or not b.records[-1].final:
        return []
    last_in_loop = b.records[-2].step
    before = _Births(b.records[:-1], b.groups[:-1], b.deep, [r for r in b.holders if r.step <= last_in_loop])
    out = []
    for key in sorted(set(before.groups[-1]) - set(b.groups[-1]) - judged):
        group = _group(before, key, {}, {})
        if group is not None and group.accumulating:
            out.append((before, replace(group, ended=b.step)))
    return out


def _collected_cycles(b: _Births, hkinds, collected_at: Sequence[int] | None = None) -> Collected:
    """Survivors that accumulated, then all died at once when Python's cyclic garbage collector ran:
    a reference cycle (through autograd, a closure, a ctx) frees them only then. Where the run says
    when full collections ran (`collected_at`), only a death across one counts: tensors a later
    walk no longer lists apart (the last walk reaches them through their holder's graphs) live on."""
    cyclic: Collected = {}
    # Only for survivors no root reached (a name from gc referrers at most): a named container
    # emptied at once is a reset (an epoch's metric), not a cycle; so is another thread's local
    # (named from its code: probes/referrers.py). Accumulation is judged since the last such mass
    # death: the collector may run every few steps.
    last_death: dict[Key, int] = {}
    for i in range(1, len(b.records)):
        prev, cur = b.records[i - 1], b.records[i]
        for key, cohorts in b.groups[i - 1].items():
            if key[1] and (key[1] in hkinds or is_thread_local(key[1])):
                continue
            el = [d for d in b.eligible_at(prev.step) if d > last_death.get(key, -1)]
            before = sorted(born for born in cohorts if born in el)
            after = [born for born in b.groups[i].get(key, {}) if born in before]
            ran = collected_at is None or any(prev.step < c <= cur.step for c in collected_at)
            if ran and len(before) >= MIN_COHORTS and len(after) <= max(1, len(before) // 4):
                last_death[key] = prev.step
                if _accumulating(before, el, prev.step):
                    n, _, times = cyclic.get(key, (0, 0, 0))
                    cyclic[key] = (max(n, len(before)), cur.step, times + 1)
    return cyclic


def _group(b: _Births, key: Key, cyclic: Collected, marked: Groups) -> _Group | None:
    """The group `key` when it counts; None when its tensors neither accumulate nor form cycles."""
    cohorts = b.groups[-1].get(key, {})
    alive = sorted(born for born in cohorts if born in b.eligible)
    gc_freed = key in cyclic
    accumulating = _accumulating(alive, b.eligible, b.step) and not _filled(b.holders, key[1])
    if not (accumulating or gc_freed or key in marked):
        return None
    marked_only = key in marked and not (accumulating or gc_freed)
    if marked_only:
        src = marked[key]  # cyclic garbage made every step, whenever the collector happens to run
    elif gc_freed and not accumulating:
        # describe the accumulation seen before the collection
        _, at, _ = cyclic[key]
        src = next(
            b.groups[i - 1][key]
            for i in range(len(b.records) - 1, 0, -1)
            if key in b.groups[i - 1] and b.records[i].step == at
        )
    else:
        src = cohorts
    return _Group(key[0], key[1], alive, accumulating, gc_freed, marked_only, src)


def _survivor_entry(findings: Entries, b: _Births, g: _Group, cyclic: Collected, hkinds) -> None:
    """Add the group's evidence to its holder's (else its site's) entry, or to the retained graph
    that keeps tensors no name holds."""
    per = [c.bytes for c in g.cohorts.values()]
    bps = float(np.median(per))
    graphs = [(loc, f) for loc, f in findings.items() if f.get("leak") and f["kind"] == Kind.RETAINED_GRAPH]
    if not g.holder and graphs and not g.gc_freed:
        # kept alive by a retained autograd graph (saved for backward), not by a name: that graph's evidence
        _, graph = max(graphs, key=lambda lf: lf[1]["confidence"])
        graph["evidence"].append(
            f"tensors created at {g.site} on {len(g.alive)} of the last {len(b.eligible)} sampled steps are still "
            f"alive at step {b.step}, reachable only through the autograd graph ({fmt_bytes(bps)} per step)"
        )
        graph["bps"] = max(graph["bps"], bps)
        return
    hkind, kind, cycle = _survivor_kind(g, hkinds)
    if hkind == "referrer" and cycle is None and not g.gc_freed and (twin := _walked_twin(b, g, hkinds, findings)):
        twin[1]["evidence"].extend(_survivor_evidence(b, g, cyclic, bps))
        twin[1]["evidence"].append(
            f"{g.holder} is named by what refers to those tensors (the walk did not reach them); tensors of the "
            f"same line that it did reach are kept by {twin[0]}: most likely the same objects, in the part of it "
            f"the walk does not sample"
        )
        return
    loc = g.holder or _cycle_holder(g) or g.site
    conf = _confidence(b, g, cyclic)
    f = findings.get(loc)
    if f is None:
        grads = sum(c.grad for c in g.cohorts.values())
        f = entry(findings, loc, kind=kind)
        f.update(fix=culprit_fix(kind, loc, hkind, False, grads > 0, False), kind=kind)
    if cycle is not None and cycle[1] not in f["evidence"]:
        f.update(kind=kind, fix=cycle[2])
        f["evidence"].append(cycle[1])
        f["data"]["cycle"] = True
    f["leak"] = True
    f["confidence"] = max(f["confidence"], conf)
    f["bps"] = max(f["bps"], bps)
    f["total"] = max(f["total"], sum(per))
    f["evidence"].extend(_survivor_evidence(b, g, cyclic, bps))
    f["data"].setdefault("sites", []).append(g.site)
    if not g.holder and cycle is None:
        # held by no name: what each tensor costs beyond its data (its objects, its graph) comes from how many a step
        f["data"]["per_step"] = {
            "tensors": float(np.median([c.count for c in g.cohorts.values()])),
            "grad_fns": float(np.median([c.grad for c in g.cohorts.values()])),
        }
    if (g.holder and cycle is None) or cycles.keeps_graph(cycles.cycle_mark(g.cohorts.values(), g.holder)):
        # a named holder of tensors with a grad_fn keeps their graphs (saved_graphs credits it), as
        # does a cycle through what a graph saved
        grads = max(c.grad for c in g.cohorts.values())
        f["data"]["grad_tensors"] = max(f["data"].get("grad_tensors", 0), grads)


def _walked_twin(b: _Births, g: _Group, hkinds, findings: Entries) -> tuple[str, dict] | None:
    """The leaking entry of a holder the walk named for tensors of `g`'s site, where `g`'s own
    holder was named by gc referrers only: a long container's items past the ends the walk samples
    are named by their own attribute (``Categorical.logits`` of the distributions kept in a list)."""
    for site, holder in sorted({key for groups in b.groups for key in groups}):
        f = findings.get(holder) if site == g.site and holder in hkinds else None
        if f is not None and f.get("leak"):
            return holder, f
    return None


def _cycle_holder(g: _Group) -> str:
    """What holds tensors no name reaches, when the cycle they sit in says: a custom autograd
    Function's ctx (``Fn.ctx``, as a holder named through it reads ``Fn.ctx.attr``) or what a graph
    saved (``cycles.cycle_holder``); else ""."""
    mark = cycles.cycle_mark(g.cohorts.values(), g.holder)
    if cycles.keeps_graph(mark):
        return cycles.cycle_holder(mark)
    return f"{mark[4:]}.ctx" if mark.startswith("ctx:") else ""


def _survivor_kind(g: _Group, hkinds) -> tuple[str, Kind, tuple[Kind, str, str] | None]:
    """The holder's kind, the leak's kind, and the reference cycle that keeps the tensors, if one does."""
    hkind = hkinds.get(g.holder, "unreachable" if not g.holder else "referrer")
    if ".ctx." in g.holder:
        hkind = "autograd_ctx"
    kind = Kind.CACHED_TENSOR if hkind in ("module_attr", "buffer") else Kind.SURVIVING_TENSORS
    cycle = (
        cycles.describe(cycles.cycle_mark(g.cohorts.values(), g.holder), g.site, g.holder)
        if hkind in ("unreachable", "referrer", "autograd_ctx")
        else None
    )
    if cycle is not None:
        kind = cycle[0]
    return hkind, kind, cycle


def _confidence(b: _Births, g: _Group, cyclic: Collected) -> float:
    if g.marked_only:
        return 0.75
    if g.gc_freed and not g.accumulating:
        return 0.7 + 0.1 * min(2, cyclic[g.key][2])
    share = len(g.alive) / len(b.eligible)
    return 0.55 + 0.4 * min(1.0, share) * min(1.0, len(g.alive) / 6)


def _survivor_evidence(b: _Births, g: _Group, cyclic: Collected, bps: float) -> list[str]:
    """Which steps' tensors are still alive and what holds them; when the collector freed them, that."""
    step = b.step
    lines = []
    held = (
        f"held by {g.holder}"
        if g.holder
        else "held by nothing memleak could name (not a variable, attribute or container it reached)"
    )
    if g.alive:
        counts = [c.count for c in g.cohorts.values()]
        lines.append(
            f"tensors created at {g.site} on {len(g.alive)} of the last {len(b.eligible)} sampled steps "
            f"are still alive at step {step} (the oldest from step {g.alive[0]}, {step - g.alive[0]} steps ago): "
            f"about {np.median(counts):.0f} tensor(s), {fmt_bytes(bps)} in all, from each step, {held}"
        )
    if g.ended is not None:
        lines.append(
            f"none of them is alive at the check after the loop's last step (step {g.ended}): what held them was "
            "the loop's own (a generator it iterated, a local of a function it ran), freed only when the loop "
            "ended; they pile up for as long as the loop runs"
        )
    if g.key in cyclic:
        n_before, at, times = cyclic[g.key]
        lines.append(
            f"tensors from up to {n_before} sampled steps, reachable from no variable, were freed all at once "
            f"({times} time(s), the last before step {at}): Python's cyclic garbage collector freed a reference "
            "cycle that held them; "
            f"memory grows between collections, and the collector does not run on device-memory pressure"
        )
    return lines


# ---------------------------------------------------------------- cohorts


def _alive_by_key(record: BirthsRecord) -> Groups:
    groups: Groups = defaultdict(dict)
    for c in record.cohorts:
        groups[(c.site, c.holder or "")][c.born] = c
    return groups


def _filled(holders: Sequence[HoldersRecord], holder: str) -> bool:
    """Whether the named `holder` stopped growing: its tensor count ends in a long flat stretch
    (sampled_trend.plateaued), or all but stopped (`decelerated`: a cache of a finite set of keys
    filling up). Its old tensors that survive are a full cache's entries still in
    use (an LRU cache's hits, a ring buffer's slots), not an accumulation."""
    if not holder:
        return False
    rows = [(r.step, row.count) for r in holders for row in r.holders if row.holder == holder]
    if len(rows) < MIN_COHORTS or rows[-1][0] != holders[-1].step:
        return False
    steps, counts = [s for s, _ in rows], [c for _, c in rows]
    return plateaued(steps, counts, MIN_COUNT_RISE) or decelerated(steps, counts, MIN_COUNT_RISE)


def _accumulating(alive: list[int], eligible: list[int], step: int) -> bool:
    """Tensors from most sampled steps since the start are alive, the oldest among them."""
    if len(eligible) < MIN_COHORTS or len(alive) < MIN_COHORTS:
        return False
    oldest_kept = alive[0] <= eligible[min(1, len(eligible) - 1)]
    return len(alive) / len(eligible) >= MIN_SURVIVING_SHARE and oldest_kept and step - alive[0] >= 6


def _cycle_marked(groups: list[Groups]) -> Groups:
    """Cohorts the probe saw held by an autograd reference cycle, by (site, holder), when cohorts
    born on at least two different sampled steps were: each step makes new cyclic garbage holding
    tensors, which only a full collection frees, however soon it happens to run."""
    marked: Groups = {}
    for rec in groups:
        for key, cohorts in rec.items():
            for born, c in cohorts.items():
                if c.cycle:
                    marked.setdefault(key, {})[born] = c
    # a site's cohorts the walk named on some steps and not on others are one cause: the named holder
    for site, holder in [k for k in marked if not k[1]]:
        named = [k for k in marked if k[0] == site and k[1]]
        if named:
            into = max(named, key=lambda k: len(marked[k]))
            marked[into] = {**marked.pop((site, holder)), **marked[into]}
    return {k: v for k, v in marked.items() if len(v) >= 2}
