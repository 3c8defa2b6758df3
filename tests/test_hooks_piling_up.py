"""A hook registered inside the loop with its handle dropped piles up on its module: the module
probe counts each module's hooks with its other registered entries (probes/registry.py), and a
count that rises step after step is named (detect/registered._hooks_entry), even where the hooks
keep nothing big (a list they fill is cleared each step)."""
from __future__ import annotations

import torch
from torch import nn

import memleak
from memleak.probes.registry import Registry


def _loop(register_each_step: bool, steps: int = 30):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    activations: list = []
    handles = []

    def keep(m, i, o):
        activations.append(o.detach())

    if not register_each_step:
        handles.append(model[1].register_forward_hook(keep))
    try:
        with memleak.track(model, optimizer=opt, level="full") as tracker:
            for _ in range(steps):
                if register_each_step:  # the handle is dropped: never removed
                    model[1].register_forward_hook(lambda m, i, o: activations.append(o.detach()))
                x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                activations.clear()
                tracker.step()
    finally:
        model[1]._forward_hooks.clear()
    return tracker.report()


def test_a_forward_hook_registered_every_step_is_named_with_its_line_and_the_remove_fix():
    report = _loop(register_each_step=True)
    assert report.verdict.value == "leak", str(report)
    top = report.suspects[0]
    assert top.location == "1._forward_hooks", str(report)
    assert top.kind.value == "python_objects"
    assert any("gains hooks as the run goes" in e and "test_hooks_piling_up.py:" in e for e in top.evidence), top
    assert "h.remove()" in top.fix
    assert top.bytes_per_step > 0


def test_one_hook_registered_before_the_loop_is_no_suspect():
    report = _loop(register_each_step=False)
    assert report.verdict.value != "leak", str(report)
    assert not any("_forward_hooks" in s.location for s in report.suspects), str(report)


def test_the_registry_counts_module_and_parameter_hooks_and_sizes_them():
    model = nn.Linear(4, 4)
    registry = Registry()
    assert registry.rows(model) == ()  # first seen
    handles = [model.register_forward_pre_hook(lambda m, i: None) for _ in range(3)]
    handles += [model.weight.register_hook(lambda g: g) for _ in range(5)]
    (row,) = registry.rows(model)
    assert (row.path, row.first, row.entries, row.grew) == ("<root>", 2, 10, "hooks")
    assert row.newest.startswith("weight._backward_hooks (test_hooks_piling_up.py:")  # the dict holding most
    assert row.bytes > 0
    for h in handles:
        h.remove()
    assert registry.rows(model) == ()  # back to its first count


def test_a_module_that_loses_entries_of_every_kind_while_its_hooks_stay_gets_a_row_of_what_it_lost():
    model = nn.Module()
    model.sub = nn.ReLU()
    model.w = nn.Parameter(torch.zeros(2))
    model.register_buffer("b", torch.zeros(2))
    registry = Registry()
    registry.rows(model)
    del model.sub, model.w, model.b  # fewer of each; the hooks (none) unchanged
    (row,) = registry.rows(model)
    assert row.grew in ("submodules", "parameters", "buffers") and (row.first, row.entries) == (3, 0)
