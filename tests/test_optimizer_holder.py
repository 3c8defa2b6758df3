"""Parameters the optimizer keeps that are not the model's (``add_param_group`` on every step):
counted and named under ``<optimizer>.param_groups`` (probes/optimizer_params.py), while the
model's own parameters, gradients and optimizer state stay owned (probes/identity.py)."""
from __future__ import annotations

import sys

import memleak
import torch
from torch import nn

from memleak.detect.culprit_fixes import _container_fix
from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages, excluded_ids
from memleak.probes.optimizer_params import StartParams, stale_params


def _grown(steps: int):
    """A model and an Adam that gained a fresh adapter group on each of `steps` steps."""
    model = nn.Linear(8, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        adapter = nn.Linear(8, 8)
        opt.add_param_group({"params": adapter.parameters()})
        opt.zero_grad()
        model(adapter(torch.ones(3, 8))).sum().backward()
        opt.step()
    return model, opt


def test_only_the_models_parameters_and_their_state_are_owned():
    model, opt = _grown(3)
    ids, _ = excluded_ids(model, opt)
    for p in model.parameters():
        assert id(p) in ids and all(id(v) in ids for v in opt.state[p].values())
    foreign = [p for g in opt.param_groups[1:] for p in g["params"]]
    assert len(foreign) == 6
    assert not any(id(p) in ids for p in foreign)
    assert not any(id(v) in ids for p in foreign for v in opt.state[p].values())


def test_without_a_model_every_optimizer_parameter_is_owned():
    _, opt = _grown(2)
    ids, _ = excluded_ids(None, opt)
    assert all(id(p) in ids for g in opt.param_groups for p in g["params"])
    assert all(id(v) in ids for st in opt.state.values() for v in st.values())


def test_stale_params_list_each_with_its_gradient_and_state():
    model, opt = _grown(2)
    ids, _ = excluded_ids(model, opt)
    stale = stale_params(opt, ids)
    # two groups of (weight, bias); each with exp_avg, exp_avg_sq, step; the last group's grads too
    assert len(stale) == 2 * 2 * 4 + 2
    assert {id(t) for t in stale} >= {id(p) for g in opt.param_groups[1:] for p in g["params"]}


def test_the_walk_names_the_optimizers_param_groups_and_they_grow():
    counts = []
    for steps in (2, 6):
        model, opt = _grown(steps)
        ids, _ = excluded_ids(model, opt)
        h = walk_roots(step=9, model=model, optimizer=opt, ages=Ages(), exclude=ids, frames=[sys._getframe()]).holders
        st = h["opt.param_groups"]
        assert st.kind == "optimizer_params" and "not the model's" in st.note
        counts.append(st.count)
        assert not any("state" in k for k in h), list(h)
    assert counts[1] > 2 * counts[0]


def test_a_model_trained_by_its_optimizer_alone_has_no_param_groups_holder():
    model = nn.Linear(8, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(3, 8)).sum().backward()
    opt.step()
    ids, _ = excluded_ids(model, opt)
    h = walk_roots(step=3, model=model, optimizer=opt, ages=Ages(), exclude=ids, frames=[sys._getframe()]).holders
    assert not any("param_groups" in k for k in h), list(h)


def _group_added_every_step(with_model: bool):
    """The top suspect of a loop that adds a parameter group every step, tracked with the model
    (steps ended by `tracker.step()`) or with the optimizer alone (ended by its steps)."""
    model = nn.Linear(64, 4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with memleak.track(model if with_model else None, optimizer=opt, level="full") as tracker:
        for _ in range(20):
            adapter = nn.Linear(64, 64)
            opt.add_param_group({"params": adapter.parameters()})
            opt.zero_grad()
            model(adapter(torch.ones(8, 64))).sum().backward()
            opt.step()
            if with_model:
                tracker.step()
    return tracker.report().suspects[0]


def test_a_tracked_run_names_the_group_added_every_step():
    top = _group_added_every_step(with_model=True)
    assert "opt.param_groups" in top.location
    assert "add_param_group" in top.fix


def test_the_fix_says_how_to_stop_adding_groups():
    fix = _container_fix("opt.param_groups", "optimizer_params", "")
    assert "add_param_group" in fix and "before the loop" in fix


def test_without_a_model_the_parameters_held_when_first_seen_are_owned():
    model = nn.Linear(8, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = StartParams(opt)  # first seen: the model's parameters
    for _ in range(2):
        opt.add_param_group({"params": nn.Linear(8, 8).parameters()})
    ids, _ = excluded_ids(None, opt, start)
    assert all(id(p) in ids for p in model.parameters())
    assert not any(id(p) in ids for g in opt.param_groups[1:] for p in g["params"])
    h = walk_roots(step=3, model=None, optimizer=opt, ages=Ages(), exclude=ids, frames=[sys._getframe()]).holders
    assert h["opt.param_groups"].count == 4


def test_a_run_tracked_with_the_optimizer_alone_names_the_group_added_every_step():
    top = _group_added_every_step(with_model=False)
    assert top.leak and top.location == "opt.param_groups", top
    assert "add_param_group" in top.fix


def test_a_run_tracked_with_the_optimizer_alone_and_fixed_groups_names_no_param_groups():
    model = nn.Linear(64, 4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with memleak.track(optimizer=opt, level="full") as tracker:
        for _ in range(12):
            opt.zero_grad()
            model(torch.ones(8, 64)).sum().backward()
            opt.step()
    report = tracker.report()
    assert not any("param_groups" in s.location for s in report.suspects)
    assert not any("param_groups" in r.holder for rec in tracker.run().holders for r in rec.holders)


def test_a_list_the_code_keeps_in_a_param_group_is_a_holder_but_its_settings_are_not():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.param_groups[0]["loss_trace"] = []
    opt.param_groups[0]["initial_lr"] = 0.1  # what an LR scheduler adds: a number, no holder
    for _ in range(3):
        loss = model(torch.ones(3, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        opt.param_groups[0]["loss_trace"].append(loss)
    exclude, _ = excluded_ids(model, opt)
    w = walk_roots(step=3, model=model, optimizer=opt, ages=Ages(), exclude=exclude, frames=[sys._getframe()])
    st = w.holders["opt.param_groups[0]['loss_trace']"]
    assert st.count == 2 and st.nodes > 0  # the newest loss is the local `loss`'s
    assert not any("initial_lr" in name or "momentum" in name for name in w.holders)


def test_lists_the_code_keeps_in_the_optimizers_state_are_one_holder_but_its_own_state_is_not():
    model = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # its momentum buffers: its own
    for _ in range(3):
        loss = model(torch.ones(3, 8)).sum()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            opt.state[p].setdefault("grad_norms", []).append(p.grad.norm())
        opt.step()
    exclude, _ = excluded_ids(model, opt)
    w = walk_roots(step=3, model=model, optimizer=opt, ages=Ages(), exclude=exclude, frames=[sys._getframe()])
    st = w.holders["opt.state[...]['grad_norms']"]
    assert st.count == 3 * 4 and st.kind == "optimizer_attr"  # four parameters, one holder
    assert not any("momentum" in name for name in w.holders)


def test_lbfgs_curvature_history_is_its_own_state_not_a_holder():
    """torch.optim.LBFGS keeps its last `history_size` directions in lists in its state (old_dirs,
    old_stps, ro, al): bounded, and torch's own; a list the code keeps beside them is still named."""
    model = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    x = torch.randn(16, 8)
    for _ in range(3):

        def closure():
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss

        opt.step(closure)
        opt.state[next(model.parameters())].setdefault("losses", []).append(closure())
    assert len(opt.state[next(model.parameters())]["old_dirs"]) > 2
    exclude, _ = excluded_ids(model, opt)
    w = walk_roots(step=3, model=model, optimizer=opt, ages=Ages(), exclude=exclude, frames=[sys._getframe()])
    assert not any(k in name for name in w.holders for k in ("old_dirs", "old_stps", "'ro'", "'al'"))
    assert "opt.state[...]['losses']" in w.holders


def test_state_of_parameters_no_group_lists_any_more_is_named_under_state_with_its_fix():
    """A head replaced by assigning ``param_groups[i]["params"]``: the old head's parameters stay keys
    of ``opt.state``, with their moments (gsplat #931, DeepSpeed #6729)."""
    from memleak.probes.optimizer_params import orphaned_state

    body = nn.Linear(8, 8)
    head = nn.Linear(8, 2)
    opt = torch.optim.Adam([{"params": body.parameters()}, {"params": head.parameters()}], lr=1e-3)
    with memleak.track(nn.ModuleDict({"body": body}), optimizer=opt, level="full") as tracker:
        for _ in range(30):
            head = nn.Linear(8, 2)  # a fresh head per task
            opt.param_groups[1]["params"] = list(head.parameters())
            opt.zero_grad()
            head(body(torch.randn(4, 8))).sum().backward()
            opt.step()
            tracker.step()
    orphans = orphaned_state(opt)
    assert len(orphans) >= 29 * 2 * 3  # each old head's weight and bias, its gradient... and its moments
    assert all(p in opt.state for p in orphans if isinstance(p, nn.Parameter))
    report = tracker.report()
    top = report.suspects[0]
    assert report.verdict == memleak.Verdict.LEAK and top.location == "opt.state", str(report)
    assert "del opt.state[p]" in top.fix
    assert orphaned_state(torch.optim.Adam(body.parameters())) == []  # no state yet


class _MomentumWithGrad(torch.optim.Optimizer):
    """A hand-written momentum step without ``@torch.no_grad()`` (AdaHessian ports: pytorch-optimizer #358)."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["buf"] = torch.zeros_like(p.data)
                st["buf"].mul_(0.9).add_(p.grad)  # p.grad carries a graph: so does buf, chained step to step
                p.data.add_(st["buf"].data, alpha=-group["lr"])


def _graphed_state_run(create_graph: bool):
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = _MomentumWithGrad(model.parameters())
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(30):
            opt.zero_grad()
            model(torch.randn(32, 16)).pow(2).mean().backward(create_graph=create_graph)
            opt.step()
            tracker.step()
    return model, opt, tracker.report()


def test_optimizer_state_that_carries_a_graph_is_not_owned_and_is_named_with_no_grad_as_its_fix():
    from memleak.probes.optimizer_params import graphed_state

    model, opt, report = _graphed_state_run(create_graph=True)
    ids, _ = excluded_ids(model, opt)
    assert graphed_state(opt) and not any(id(t) in ids for t in graphed_state(opt))
    top = report.suspects[0]
    assert (top.kind, top.location) == ("retained_graph", "opt.state"), str(report)
    assert "@torch.no_grad()" in top.fix
    for p in model.parameters():
        p.grad = None  # the graph's cycle through .grad (create_graph) outlives the test otherwise


def test_the_same_optimizer_on_plain_gradients_keeps_owned_state_and_no_leak():
    model, opt, report = _graphed_state_run(create_graph=False)
    ids, _ = excluded_ids(model, opt)
    assert all(id(opt.state[p]["buf"]) in ids for p in model.parameters())
    assert report.verdict != memleak.Verdict.LEAK, str(report)
