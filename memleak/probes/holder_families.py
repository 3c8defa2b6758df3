"""Holders made one per step: ``setattr(self, f"act_{step}", x)``, a module added per task
(``heads[f"task{i}"]``). Each holds a tensor or two and none of them grows, but together they
do. A walk folds each such family into one holder, the numbers in its name written ``*``
(``layer.act_*``), so that what grows is seen growing, under a name the user finds in their code.
"""

from __future__ import annotations

from collections import defaultdict

from ..holder_names import family_name
from .holder_stats import HolderStats, HolderTally

#: Holders whose names differ only in the numbers in their named parts fold into one from this many
#: on (fewer are as likely a fixed set: ``head_0`` to ``head_3``, a ResNet's ``layer1`` to ``layer4``).
FAMILY_MIN = 6

#: Fields summed over a family's members.
_SUMMED: tuple[str, ...] = ("count", "nbytes", "n_grad", "old", "old_bytes", "host_bytes", "nodes")
_SUMMED += ("views", "arrays", "np_arrays", "images", "objects", "obj_bytes")


def fold_families(tally: HolderTally) -> None:
    """Fold, in a finished walk's tally, each family of FAMILY_MIN holders or more into one: its
    counts summed, its tensors and graph roots under the family's name."""
    families: dict[str, list[str]] = defaultdict(list)
    for name in tally.holders:
        family = family_name(name)
        if family is not None:
            families[family].append(name)
    for family, names in families.items():
        if len(names) < FAMILY_MIN or family in tally.holders:
            continue
        tally.holders[family] = _merged(family, [tally.holders.pop(n) for n in names])
        roots = set().union(*(tally.roots.pop(n, set()) for n in names))
        if roots:
            tally.roots[family] = roots
        members = set(names)
        for tid, holder in tally.tensor_holder.items():
            if holder in members:
                tally.tensor_holder[tid] = family


def _merged(family: str, members: list[HolderStats]) -> HolderStats:
    st = HolderStats(family, members[0].kind)
    for m in members:
        add_into(st, m)
    st.note = f"{len(members)} holders named {family}, a number each (one made per step or batch), counted as one"
    return st


def add_into(st: HolderStats, m: HolderStats) -> None:
    """Holder `m`'s finished counts added to `st`'s."""
    for field in _SUMMED:
        setattr(st, field, getattr(st, field) + getattr(m, field))
    st.nodes_capped |= m.nodes_capped
    st.estimated |= m.estimated
    st.linked |= m.linked
    if m.seq is not None:
        st.seq = m.seq if st.seq is None else (min(st.seq[0], m.seq[0]), max(st.seq[1], m.seq[1]))


def rename_holders(tally: HolderTally, old: str, new: str) -> None:
    """Holder `old`'s tensors, graph roots and counts under `new` (added to its own, if it has any)."""
    st = tally.holders.pop(old)
    if (into := tally.holders.get(new)) is not None:
        add_into(into, st)
    else:
        st.holder = new
        tally.holders[new] = st
    if roots := tally.roots.pop(old, None):
        tally.roots[new] = tally.roots.get(new, set()) | roots
    for tid, holder in tally.tensor_holder.items():
        if holder == old:
            tally.tensor_holder[tid] = new
