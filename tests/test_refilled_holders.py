"""Holders judged on what they keep, not on their names alone: a holder emptied or replaced
between samples (the tokens of the request in progress, a new list per request) does not
accumulate, however many more tensors it holds at the end than at the start; and the entries of a
dict that gains a key every step (a cache keyed by session id), named one key at a time while the
dict is small, grow as the dict. Pure detector tests on synthetic records."""

from __future__ import annotations

from memleak.detect.holder_growth import holder_findings
from memleak.detect.keyed_holders import fold_keyed
from memleak.records import HolderRow, HoldersRecord

KIB = 1024


def _leaks(records) -> set[str]:
    found: dict = {}
    holder_findings(records, {}, None, found, set())
    return {loc for loc, f in found.items() if f["leak"]}


def _per_request(steps, counts, old):
    # `prompt` is held for the whole run (old from its second sample on): the walks record ages
    return [
        HoldersRecord(
            step=s,
            holders=(
                HolderRow(holder="req.tokens", kind="local", count=c, bytes=c * 4 * KIB, old=o),
                HolderRow(holder="prompt", kind="local", count=1, bytes=KIB, old=float(i > 0)),
            ),
        )
        for i, (s, c, o) in enumerate(zip(steps, counts, old, strict=True))
    ]


def test_a_holder_refilled_between_samples_is_judged_on_its_growth_since():
    steps = [1, 7, 11, 13]
    counts = [0, 1, 1, 3]
    # the list held at step 7 is gone at step 11 (none of its tensors is old there): a new request
    assert _leaks(_per_request(steps, counts, [0, 0, 0, 1])) == set()
    # the same counts where each sample still holds what the one before held: accumulation
    assert _leaks(_per_request(steps, counts, [0, 0, 1, 1])) == {"req.tokens"}


def test_a_holder_refilled_early_that_grows_steadily_since_is_still_a_leak():
    steps = [1, 4, 7, 10, 13, 16]
    counts = [3, 1, 3, 5, 7, 9]
    # emptied once between steps 1 and 4, then keeps everything: four samples of growth since
    assert _leaks(_per_request(steps, counts, [0, 0, 1, 3, 5, 7])) == {"req.tokens"}


def _sessions(steps, keys_per_sample, fields=False):
    out = []
    for s, n in zip(steps, keys_per_sample, strict=True):
        rows = [
            HolderRow(
                holder=f"server.sessions['user-{k}']", kind="local", count=4, bytes=24 * KIB, old=4.0 * (k < n - 2)
            )
            for k in range(n)
        ]
        if fields:
            rows += [
                HolderRow(holder=f"stats['{f}']", kind="local", count=1, bytes=KIB, old=1) for f in ("loss", "acc")
            ]
        out.append(HoldersRecord(step=s, holders=tuple(rows)))
    return out


def test_entries_of_a_dict_that_gains_keys_grow_as_the_dict():
    steps = [1, 3, 5, 7, 9, 11]
    records = _sessions(steps, [2, 4, 6, 8, 10, 12], fields=True)
    assert _leaks(records) == {"server.sessions"}
    # a dict of fixed fields is left to its entries, which do not grow
    by = {f"stats['{f}']": [HolderRow(holder=f"stats['{f}']", count=1)] * 6 for f in ("loss", "acc")}
    fold_keyed(steps, by)
    assert "stats" not in by


def test_a_dict_of_records_that_gains_a_record_a_step_grows_as_the_dict():
    """`results[f"batch_{i}"] = {"logits": ..., "target": ...}`: the walk names each record's fields
    (`results['batch_3']['logits']`); the records multiply, so they fold into `results`, which grows
    in tensors (not only in graph nodes, which would read as a chain)."""
    steps = [1, 3, 5, 7, 9, 11]
    by = {
        f"results['batch_{k}']['{f}']": [HolderRow(holder="x", count=1, bytes=KIB) if k < 2 * (i + 1) else None
                                         for i in range(6)]
        for k in range(12) for f in ("logits", "target")
    }
    fold_keyed(steps, by)
    assert [r.count for r in by["results"]] == [4, 8, 12, 16, 20, 24]
    # a dict of fixed records (train and val metrics, each with fixed fields) does not multiply
    fixed = {f"metrics['{s}']['{f}']": [HolderRow(holder="x", count=1)] * 6 for s in ("train", "val") for f in ("a", "b")}
    fold_keyed(steps, fixed)
    assert "metrics" not in fixed


def test_a_dict_whose_keys_rotate_within_a_bound_is_no_leak():
    # an LRU of four sessions: four keys at every sample, the oldest evicted as a new one comes
    steps = [1, 3, 5, 7, 9, 11]
    records = [
        HoldersRecord(
            step=s,
            holders=tuple(
                HolderRow(holder=f"lru['user-{k}']", kind="local", count=4, bytes=24 * KIB, old=4.0 * (k < i))
                for k in range(i, i + 4)
            ),
        )
        for i, s in enumerate(steps)
    ]
    assert _leaks(records) == set()


def test_a_dict_named_whole_once_large_continues_the_series_of_its_entries():
    steps = [1, 3, 5, 7, 9, 11]
    records = _sessions(steps[:4], [2, 4, 6, 8])
    for s, n in ((9, 20), (11, 24)):  # past the walk's per-key naming: one row for the whole dict
        records.append(
            HoldersRecord(
                step=s,
                holders=(
                    HolderRow(holder="server.sessions", kind="local", count=4 * n, bytes=24 * KIB * n, old=4 * n - 8),
                ),
            )
        )
    by = {}
    for i, r in enumerate(records):
        for row in r.holders:
            by.setdefault(row.holder, [None] * len(steps))[i] = row
    fold_keyed(steps, by)
    assert [r.count for r in by["server.sessions"]] == [8, 16, 24, 32, 80, 96]
    assert _leaks(records) == {"server.sessions"}


def test_a_list_cleared_between_every_sample_is_no_leak_even_when_nothing_is_ever_old():
    # an evaluation epoch's logits, cleared every 5 steps and sampled at steps 1, 7 and 13: more at
    # each sample by chance, but none of them seen at an earlier walk (real walks: nodes_walked > 0)
    records = [
        HoldersRecord(
            step=s,
            holders=(HolderRow(holder="evaluator.step_logits", kind="local", count=c, bytes=c * 32 * KIB),),
            walk_seconds=0.01,
            nodes_walked=500,
        )
        for s, c in ((1, 2), (7, 3), (13, 4))
    ]
    assert _leaks(records) == set()
    # the same rows where each walk still finds what the one before it found: accumulation
    kept = [
        HoldersRecord(
            step=r.step,
            holders=(HolderRow(holder="evaluator.step_logits", kind="local", count=c, bytes=c * 32 * KIB, old=o),),
            walk_seconds=0.01,
            nodes_walked=500,
        )
        for r, c, o in zip(records, (2, 3, 4), (0, 2, 3), strict=True)
    ]
    assert _leaks(kept) == {"evaluator.step_logits"}


def _queue(steps, counts, old):
    """A long queue, counted from its ends (`estimated`)."""
    return [
        HoldersRecord(
            step=s,
            holders=(HolderRow(holder="queue", kind="local", count=c, bytes=c * KIB, old=o, estimated=True),),
        )
        for s, c, o in zip(steps, counts, old, strict=True)
    ]


def test_a_long_container_seen_again_after_unwalked_steps_is_not_taken_for_refilled():
    # windows walk every other step; the last walk comes 27 steps after the one before: the
    # queue's newest end is all new there, so a quarter of it counts as old
    steps = [164, 166, 168, 170, 172, 199]
    counts = [738, 750, 756, 768, 774, 900]
    assert _leaks(_queue(steps, counts, [246, 687, 661, 704, 677, 225])) == {"queue"}
    # a new queue in its place: next to nothing old at either end
    assert _leaks(_queue(steps, counts, [246, 687, 661, 704, 677, 10])) == set()
