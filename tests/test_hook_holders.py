"""Holders reached through hooks the walk must open: a parameter's own tensor hooks
(``param.register_hook`` in ``forward``) and hook objects from torch itself
(``torch.nn.utils.prune``'s pruning container and the masks its methods keep)."""
from __future__ import annotations

import sys

import torch
from torch import nn
from torch.nn.utils import prune

from memleak.detect.culprit_fixes import _container_fix
from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages, excluded_ids


def _walk(model, opt=None):
    exclude, _ = excluded_ids(model, opt)
    return walk_roots(step=5, model=model, optimizer=opt, ages=Ages(), exclude=exclude, frames=[sys._getframe(1)])


class _HookPerForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        act = x.detach() * 2
        self.fc.weight.register_hook(lambda g, act=act: g * act.mean())  # one more hook per call
        return self.fc(x)


def test_tensor_hooks_piling_up_on_a_parameter_are_walked_and_named():
    model = _HookPerForward()
    for _ in range(3):
        model(torch.ones(2, 4)).sum().backward()
    st = _walk(model).holders["act"]
    assert st.kind == "piled_hook" and st.count == 3
    assert "on fc.weight" in st.note and "one of 3 hooks" in st.note


def test_a_torch_hook_object_is_walked_and_named_by_the_module_it_is_on():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    targets = [(model[0], "weight"), (model[1], "weight")]
    for _ in range(3):  # global pruning re-applied: each round keeps one more mask in the hook
        prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=0.1)
    st = _walk(model).holders["0._forward_pre_hooks"]
    assert st.kind == "hook" and st.count == 3
    assert "PruningContainer" in st.note
    fix = _container_fix("0._forward_pre_hooks", "hook", "")
    assert "prune.remove" in fix and "handle.remove()" in fix


def test_a_hook_object_registered_once_keeps_no_growing_holder():
    model = nn.Sequential(nn.Linear(8, 8))
    prune.l1_unstructured(model[0], "weight", amount=0.1)
    prune.remove(model[0], "weight")
    assert "0._forward_pre_hooks" not in _walk(model).holders


def test_a_pruning_hook_re_applied_every_step_is_the_suspect_with_a_hook_fix():
    import memleak

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    targets = [(model[0], "weight"), (model[2], "weight")]
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(16):
            loss = model(torch.randn(8, 16)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=0.01)
            tracker.step()
    suspects = tracker.report().suspects
    assert "_forward_pre_hooks" in suspects[0].location
    hooked = [s for s in suspects if "_forward_pre_hooks" in s.location]
    assert len(hooked) == 2 and all("prune.remove" in s.fix for s in hooked)
    # the masks are views of one global mask, but they are torch's to keep, not the user's to copy
    assert not any("store a copy of the part you need" in s.fix for s in hooked)


class _OutputRecorder:
    """A hook object on every module: keeps each Linear's output."""

    def __init__(self):
        self.outputs = []

    def __call__(self, module, inputs, output):
        if isinstance(module, nn.Linear):
            self.outputs.append(output)


def _register_globally(hook):
    """The hook in torch's dict of global forward hooks only (no local or global of this file keeps it)."""
    return torch.nn.modules.module.register_module_forward_hook(hook)


def _walk_with_global_hook(make_hook, forwards: int):
    """The walk after `forwards` calls of a small model, a hook `make_hook()` made on every module
    meanwhile (made here, so that no local of the walked frame holds it)."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    handle = _register_globally(make_hook())
    try:
        for _ in range(forwards):
            model(torch.ones(2, 4))
        return _walk(model)
    finally:
        handle.remove()


def test_a_global_hook_object_is_walked_and_named_by_its_class():
    st = _walk_with_global_hook(_OutputRecorder, forwards=3).holders["_OutputRecorder.outputs"]
    assert st.count == 6 and st.kind == "hook"
    assert "on every module (register_module_forward_hook)" in st.note


def test_a_global_hook_closure_is_walked_and_memleaks_own_global_hooks_are_not():
    import memleak

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def install():
        kept = []
        return _register_globally(lambda m, i, o: kept.append(o) if isinstance(m, nn.Linear) else None)

    handle = install()
    try:
        # memleak's own hooks on every module (auto's young steps) and optimizer (GradScaler skips)
        with memleak.track(model, optimizer=opt, level="full"):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            theirs = len(sys.modules["torch.optim.optimizer"]._global_optimizer_post_hooks)
            walk = _walk(model, opt)
    finally:
        handle.remove()
    assert walk.holders["kept"].count == 2 and "every module" in walk.holders["kept"].note
    assert theirs == 1  # memleak's, with no code of the user's: not walked
    assert not [name for name, h in walk.holders.items() if "memleak" in h.note + name or "optimizer)" in h.note]


def _record_into(store, module, inputs, output):
    if isinstance(module, nn.Linear):
        store.append(output)


def test_a_global_hook_partial_is_named_by_its_function():
    import functools

    st = _walk_with_global_hook(lambda: functools.partial(_record_into, []), forwards=2).holders["partial(_record_into)"]
    assert st.count == 4 and st.kind == "hook"


def test_optimizer_step_hooks_piling_up_are_named_by_what_they_bind():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handles = []
    try:
        for _ in range(3):
            loss = model(torch.ones(2, 4)).sum()
            loss.backward()
            handles.append(opt.register_step_post_hook(lambda o, a, k, seen=loss: None))  # one more per step
            opt.step()
        del loss
        st = _walk(model, opt).holders["seen"]
    finally:
        for h in handles:
            h.remove()
    assert st.kind == "piled_hook" and st.count == 3
    assert "hook <lambda> on opt," in st.note and "one of 3 hooks" in st.note


class _Store:
    __slots__ = ("acts",)

    def __init__(self):
        self.acts = []


def _keep(module, inputs, output, store):
    store.acts.append(output)


def test_what_a_partial_hook_is_given_is_named_by_its_parameter():
    import functools

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model[1].register_forward_hook(functools.partial(_keep, store=_Store()))
    for _ in range(3):
        model(torch.ones(2, 4)).sum().backward()
    holders = _walk(model).holders
    st = holders["store.acts"]
    assert st.count == 3 and "captured by hook _keep on 1" in st.note
    assert not any("_forward_hooks" in name for name in holders)
