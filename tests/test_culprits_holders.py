"""The root walk names holders the way a person would look for them."""
from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from memleak.probes.frames import user_site
from memleak.probes.graphs import count_graph
from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages, excluded_ids

REGISTRY = {}


class Store:
    shared = []  # a class-level list: a registry in disguise

    def __init__(self):
        self.items = []


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.cache = [torch.zeros(3)]
        self.register_buffer("running", torch.zeros(4))


def _walk(model=None, opt=None):
    frame = sys._getframe(1)
    exclude, _ = excluded_ids(model, opt)
    return walk_roots(step=5, model=model, optimizer=opt, ages=Ages(), exclude=exclude, frames=[frame])


def test_holders_are_named_by_the_nearest_named_owner():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(Attn()))
    history = [torch.zeros(2) for _ in range(5)]
    stats = {"loss": [torch.zeros(1)], "acc": torch.zeros(1)}
    store = Store()
    store.items.append(torch.zeros(8))
    Store.shared.append(torch.zeros(8))
    REGISTRY[0] = torch.zeros(16)
    fn = (lambda t: (lambda: t))(torch.zeros(5))
    try:
        w = _walk(model)
    finally:
        Store.shared.clear()
        REGISTRY.clear()
    h = w.holders
    assert h["history"].count == 5 and h["history"].kind == "local"
    assert h["stats['loss']"].count == 1 and "stats['acc']" in h
    assert h["store.items"].count == 1
    assert h["Store.shared"].kind == "class_attr"
    assert h["REGISTRY"].kind == "global"
    # a closure cell is named by its variable and the function whose closure keeps it
    assert any(k.startswith("t (closure of ") and k.endswith("<lambda>)") for k in h), list(h)
    assert h["1.0.cache"].kind == "module_attr"
    assert "1.0.running" in w.buffers
    # parameters are never holders' tensors
    assert not any(name.endswith("weight") or name.endswith("bias") for name in h)


def test_long_containers_are_sampled_and_extrapolated():
    big = [torch.zeros(4) for _ in range(500)]
    w = _walk()
    st = w.holders["big"]
    assert st.estimated and abs(st.count - 500) < 1
    assert abs(st.nbytes - 500 * 16) < 16
    assert w.nodes < 200


def test_a_long_list_of_rows_of_many_batches_counts_every_batch_and_one_of_aliases_counts_one():
    rows = [row for _ in range(20) for row in torch.zeros(16, 4)]  # 320 views, a base of 256 B each 16
    base = torch.zeros(16, 4)
    aliases = [base[i % 16] for i in range(320)]  # 320 views of one base
    w = _walk()
    assert w.holders["rows"].estimated and w.holders["aliases"].estimated
    # the ends sampled hold a few bases; each stands for its stretch of the list (20 bases in all)
    assert 10 * 256 <= w.holders["rows"].nbytes <= 40 * 256
    assert w.holders["aliases"].nbytes == 256


def test_graph_nodes_are_counted_and_bounded():
    x = torch.randn(3, requires_grad=True)
    total = x.sum()
    for _ in range(50):
        total = total + x.sum()
    n, capped = count_graph([total.grad_fn], cap=10_000)
    assert n >= 100 and not capped
    n, capped = count_graph([total.grad_fn], cap=20)
    assert n == 20 and capped
    w = _walk()
    assert w.holders["total"].nodes >= 100 and w.holders["total"].n_grad == 1


def test_ages_survive_between_walks_and_views_count_once():
    base = torch.zeros(100)
    views = [base[:10], base[10:20]]
    ages = Ages()
    frame = sys._getframe()
    w1 = walk_roots(step=1, model=None, optimizer=None, ages=ages, exclude=set(), frames=[frame])
    w2 = walk_roots(step=4, model=None, optimizer=None, ages=ages, exclude=set(), frames=[frame])
    assert w1.holders["views"].old == 0 and w2.holders["views"].old == 2
    assert w2.holders["views"].nbytes == 400  # one storage


def test_optimizer_state_and_grads_are_excluded():
    model = nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    grads = [p.grad for p in model.parameters()]
    w = _walk(model, opt)
    assert "grads" not in w.holders


def test_user_site_skips_torch_frames():
    sites = []

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            sites.append(user_site(2))
            return func(*args, **(kwargs or {}))

    lin = nn.Linear(2, 2)
    with Mode():
        lin(torch.zeros(1, 2))  # F.linear is called from torch/nn: the site is this line
    assert any(s and s.startswith("test_culprits_holders.py:") for s in sites)


@pytest.mark.parametrize("rate, words", [
    (1.0, "one more each step"), (3.0, "3 more each step"), (0.5, "one more every 2 steps"),
    # 41 kept in 58 steps: not "one more every 1 steps"
    (0.71, "0.7 more each step"), (1.3, "1.3 more each step"), (0.01, "slowly more"),
])
def test_the_rate_a_holder_gains_items_reads_as_words(rate, words):
    from memleak.detect.holder_growth import _per_step

    assert _per_step(rate) == words
