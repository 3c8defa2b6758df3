"""Entries of one growing mapping, named one key at a time, seen as the mapping they belong to.

The walk names each entry of a small dict with string keys on its own (``metrics['loss']``,
``metrics['acc']``: a record of named fields), and a large dict as one holder. A dict that gains a
new key every step (a cache keyed by request or session id, never evicted) is small early on, so
its entries come out as holders of a few tensors each, none of which grows: the growth is in how
many there are. Here the entries of such a dict are summed into one series under the dict's name,
on the samples where their keys multiply; a dict of fixed field names keeps its keys and is left
to its entries.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ..records import HolderRow
from .sampled_trend import MIN_COUNT_RISE, sustained_rise

#: `parent['key']` (or "key"): a dict entry the walk named by its string key, or something inside
#: one (`results['batch_3']['logits']`: a dict of records gains a record a step).
_KEYED = re.compile(r"^(?P<parent>(?:[^\[]|\[\.\.\.\])+?)\[(?P<key>'[^']*'|\"[^\"]*\")\]")


def fold_keyed(steps: list[int], by: dict[str, list[HolderRow | None]]) -> None:
    """Add to `by` (holder -> its row per sample) a series for each dict whose string-keyed entries
    multiply over the samples (new keys keep coming, MIN_COUNT_RISE more at least): its entries'
    rows summed per sample, with the dict's own row where the walk named it as a whole."""
    entries: dict[str, dict[str, str]] = defaultdict(dict)  # parent -> entry's holder -> its key
    for name in by:
        m = _KEYED.match(name)
        if m is not None:
            entries[m.group("parent")][name] = m.group("key")
    for parent, keyed in entries.items():
        names = list(keyed)
        own = by.get(parent) or [None] * len(steps)
        keys: list[float] = []
        for i in range(len(steps)):
            n = len({keyed[name] for name in names if by[name][i] is not None})
            # named whole: it outgrew the dicts the walk names key by key, more keys than any before
            keys.append(float(n) if n or own[i] is None else max(keys, default=0.0) + 1)
        if sustained_rise(steps, keys, MIN_COUNT_RISE) is None:
            continue  # a record of fixed fields, or too few entries to tell
        by[parent] = [_summed(parent, [own[i], *(by[n][i] for n in names)]) for i in range(len(steps))]


def _summed(parent: str, rows: list[HolderRow | None]) -> HolderRow | None:
    seen = [r for r in rows if r is not None]
    if not seen:
        return None
    first = seen[0]
    seqs = [r.seq for r in seen if r.seq]
    return HolderRow(
        holder=parent,
        kind=first.kind,
        count=sum(r.count for r in seen),
        bytes=sum(r.bytes for r in seen),
        grad=sum(r.grad for r in seen),
        old=sum(r.old for r in seen),
        old_bytes=sum(r.old_bytes for r in seen),
        nodes=sum(r.nodes for r in seen),
        host_bytes=sum(r.host_bytes for r in seen),
        views=sum(r.views for r in seen),
        arrays=sum(r.arrays for r in seen),
        np_arrays=sum(r.np_arrays for r in seen),
        images=sum(r.images for r in seen),
        objects=sum(r.objects for r in seen),
        obj_bytes=sum(r.obj_bytes for r in seen),
        seq=(min(s[0] for s in seqs), max(s[1] for s in seqs)) if seqs else None,
        linked=any(r.linked for r in seen),
        capped=any(r.capped for r in seen),
        estimated=any(r.estimated for r in seen),
        stored=next((r.stored for r in seen if r.stored), ""),
    )
