"""``itertools.tee`` over a data iterator: the copies share the buffered items, and the copy that
is never advanced is what keeps them (probes/walk_scope.tee_unread), not the one the loop reads."""

from __future__ import annotations

import itertools
import sys

import torch

from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages
from memleak.probes.walk_scope import tee_unread


def test_the_copy_ahead_has_read_everything_the_one_behind_keeps_it():
    ahead, behind = itertools.tee(iter(range(100)))
    for _ in range(60):
        next(ahead)
    assert tee_unread(ahead) in ([], None) or all(not isinstance(x, int) for x in tee_unread(ahead))
    unread = tee_unread(behind)
    if unread is not None:  # Python < 3.14 tells a copy's position
        assert [x for x in unread if isinstance(x, int)] == list(range(57))


def test_the_walk_names_the_copy_that_is_not_advanced():
    if tee_unread(itertools.tee(())[0]) is None:
        return  # no position to read on this Python: the walk's first copy is named
    batches = (torch.ones(16) * i for i in range(10_000))
    train_it, preview_it = itertools.tee(batches)  # preview_it is never advanced
    for _ in range(40):
        next(train_it)
    h = walk_roots(step=5, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[sys._getframe()]).holders
    assert h["preview_it"].count >= 39
    assert "train_it" not in h or h["train_it"].count <= 1
