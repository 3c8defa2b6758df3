"""Tensors tagged on earlier deep steps that are still alive, grouped into cohorts: by birth step,
creation site and holder (`births`), and saved-for-backward tensors by birth step and site (`saved`).

Split from `tensors` (the TensorProbe), which tags the tensors and keeps the state between steps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from ..records import BirthCohort, SavedCohort
from .identity import tensor_nbytes
from .reach import cycle_of

#: (born, site, holder) -> [count, bytes, of them with a grad_fn]
Groups = defaultdict[tuple[int, str, str], list[int]]


@dataclass
class Survivors:
    """What one check of the tagged tensors found."""

    groups: Groups = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))
    unnamed: dict[str, Any] = field(default_factory=dict)  # site -> weak reference to one no holder names
    cycles: dict[str, str] = field(default_factory=dict)  # site -> the autograd cycle keeping them, or ""
    dead: list[int] = field(default_factory=list)  # ids of tagged tensors that died


def group_births(
    births: dict[int, tuple[Any, int, str]],
    step: int,
    exclude: set[int],
    ptrs: set[int],
    tensor_holder: dict[int, str],
    named_sites: dict[str, str],
    saved_views: dict[int, str],
) -> Survivors:
    """Group the tensors tagged two or more steps ago that are still alive and are not the run's
    own (parameters, gradients, buffers, optimizer state), by birth step, site and holder."""
    found = Survivors()
    seen_storage: set[tuple[int, str, int]] = set()
    for i, (ref, born, site) in births.items():
        t = ref()
        if t is None:
            found.dead.append(i)
            continue
        if born is None or step - born < 2 or born == step:
            continue
        if i in exclude or isinstance(t, torch.nn.Parameter):
            continue
        ptr, nb = tensor_nbytes(t)
        if ptr in ptrs:
            continue
        holder = tensor_holder.get(i)
        if holder is None and site not in found.cycles:  # no root reached it: a cycle through autograd?
            found.cycles[site] = cycle_of(t, saved_views)
        holder = holder or named_sites.get(site, "")
        if not holder and site not in found.unnamed:
            found.unnamed[site] = ref
        g = found.groups[(born, site, holder)]
        g[0] += 1
        if (born, site, ptr) not in seen_storage:
            seen_storage.add((born, site, ptr))
            g[1] += nb
        if t.grad_fn is not None:
            g[2] += 1
        del t
    return found


def cohorts_per_site(groups: Groups) -> dict[str, set]:
    """The birth steps each site has survivors from."""
    out: dict[str, set] = defaultdict(set)
    for born, site, _ in groups:
        out[site].add(born)
    return out


def name_site(groups: Groups, site: str, name: str) -> None:
    """Move the survivors of `site` that no holder named under `name`."""
    for key in [k for k in groups if k[1] == site and not k[2]]:
        vals = groups.pop(key)
        g = groups[(key[0], site, name)]
        for j in range(3):
            g[j] += vals[j]


def birth_cohorts(groups: Groups, cycles: dict[str, str]) -> list[BirthCohort]:
    """The ``births`` record's cohorts, oldest first, largest first within a step."""
    return [
        BirthCohort(born=b, site=s, holder=h, count=v[0], bytes=v[1], grad=v[2], cycle=cycles.get(s) or "")
        for (b, s, h), v in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[1][1]))
    ]


def saved_cohorts(saved: list[tuple], step: int, ptrs: set[int]) -> tuple[list[tuple], list[SavedCohort]]:
    """The saved-tensor entries still alive, and the ``saved`` record's cohorts: those tagged two or
    more steps ago, by birth step and site."""
    alive: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    keep = []
    seen: set[int] = set()
    for entry in saved:
        ref, born, ptr, nb, site = entry
        if ref() is None:
            continue
        keep.append(entry)
        if born is None or step - born < 2 or ptr in ptrs:
            continue
        a = alive[(born, site)]
        a[0] += 1
        if ptr not in seen:
            seen.add(ptr)
            a[1] += nb
    cohorts = [SavedCohort(born=b, site=s, count=c, bytes=nb) for (b, s), (c, nb) in sorted(alive.items())]
    return keep, cohorts
