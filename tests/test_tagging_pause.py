"""The creation-site mode is off while a torch.optim optimizer steps (none of its tensors are the
user's), and on wherever the user's code may run inside a step: a closure, a step hook."""

from __future__ import annotations

import sys
import weakref

import pytest
import torch

import memleak
from memleak.probes import ProbeContext
from memleak.probes.tagging import Tagging
from memleak.probes.tensors import TensorProbe


def stack_len() -> int:
    return torch._C._len_torch_function_stack()


@pytest.fixture
def deep():
    """A model, its optimizer and a TensorProbe on a deep step (its mode on)."""
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = TensorProbe()
    probe.start(ProbeContext(torch.device("cpu"), "full", weakref.ref(model), weakref.ref(opt)))
    probe.step_begin(1)
    assert isinstance(probe._mode, Tagging) and stack_len() == 1
    yield model, opt, probe
    probe.stop()
    assert stack_len() == 0


def sites(probe) -> list[str]:
    return [site for _, _, site in probe.births.values()]


def test_the_mode_is_off_inside_a_torch_optim_step_and_back_after_it(deep, monkeypatch):
    model, opt, probe = deep
    inside = []
    sgd_module = sys.modules[type(opt).__module__]
    real = sgd_module.sgd
    # the stack as SGD's update sees it (where its foreach calls would pass through the mode)
    monkeypatch.setattr(sgd_module, "sgd", lambda *a, **k: (inside.append(stack_len()), real(*a, **k))[1])
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    assert inside == [0]
    assert stack_len() == 1 and probe._paused is None
    kept = model(torch.ones(2, 4))  # the user's forward after the step is tagged again
    assert id(kept) in probe.births


def test_a_step_with_a_closure_keeps_tagging_the_user_tensors_it_makes(deep):
    model, opt, probe = deep
    made = []

    def closure():
        out = model(torch.ones(2, 4)).sum()
        made.append(out)
        out.backward()
        return out

    opt.step(closure)
    assert id(made[0]) in probe.births


def test_a_step_hook_of_the_user_keeps_its_tensors_tagged(deep):
    model, opt, probe = deep
    made = []
    handle = opt.register_step_post_hook(lambda o, a, k: made.append(torch.zeros(3) + 1))
    try:
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    finally:
        handle.remove()
    assert id(made[0]) in probe.births
    assert any(s.startswith("test_tagging_pause.py") for s in sites(probe))


def test_an_optimizer_step_that_raises_leaves_no_mode_behind(deep):
    model, opt, probe = deep
    model(torch.ones(2, 4)).sum().backward()
    opt.param_groups[0]["lr"] = "bad"  # SGD raises inside its step, after the mode went off
    with pytest.raises(TypeError):
        opt.step()
    assert probe._paused is not None and stack_len() == 0
    probe.sample(1, 0.01)  # the step ends: the hooks go, the mode is not pushed back
    assert stack_len() == 0
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    opt.param_groups[0]["lr"] = 0.1
    probe.step_begin(int(probe.next_deep))  # the next deep step tags as before
    assert stack_len() == 1


def test_the_hooks_go_with_the_probe():
    from torch.optim import optimizer as optim_hooks

    before = (len(optim_hooks._global_optimizer_pre_hooks), len(optim_hooks._global_optimizer_post_hooks))
    model = torch.nn.Linear(4, 4)
    with memleak.track(model, optimizer=torch.optim.SGD(model.parameters()), level="full"):
        assert len(optim_hooks._global_optimizer_pre_hooks) == before[0] + 1
    assert (len(optim_hooks._global_optimizer_pre_hooks), len(optim_hooks._global_optimizer_post_hooks)) == before
