"""The creation-site mode steps aside for torch's own optimizer step: every op there would cost a
Python call and get no site (torch.optim's frames are never the user's). It stays on where the
step runs the user's code (a closure, a step hook), and is back for what follows the step."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import nn

import memleak
from memleak.probes import tagging

OPTIM_DIR = os.path.join(os.path.dirname(torch.__file__), "optim") + os.sep


@pytest.fixture
def ops_in_optim(monkeypatch):
    """Counts the ops memleak's mode sees, in all and made inside an optimizer's step (torch.optim
    less optimizer.py: its wrapper's profiler ranges and zero_grad run outside the step's hooks)."""
    seen = {"optim": 0, "all": 0}
    original = tagging._BirthMode.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        seen["all"] += 1
        f = sys._getframe(1)
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith(OPTIM_DIR) and not name.endswith("optimizer.py"):
                seen["optim"] += 1
                break
            f = f.f_back
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(tagging._BirthMode, "__torch_function__", counting)
    return seen


def _loop(opt_factory, steps=4, closure=False, hook=False, after_step=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = opt_factory(model.parameters())
    if hook:
        opt.register_step_post_hook(lambda *a: None)
    x = torch.randn(4, 8)
    losses = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(steps):

            def step_closure():
                opt.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                return loss

            if closure:
                losses.append(opt.step(step_closure).item())
            else:
                losses.append(step_closure().item())
                opt.step()
            if after_step is not None:
                after_step(model, x)
            tracker.step()
    assert torch._C._len_torch_function_stack() == 0
    return tracker, losses


def test_no_op_of_torchs_optimizer_step_goes_through_the_mode(ops_in_optim):
    _loop(lambda p: torch.optim.AdamW(p, lr=1e-3))
    assert ops_in_optim["all"] > 0  # the forward and backward passes were tagged
    assert ops_in_optim["optim"] == 0


def test_a_step_hook_of_the_users_keeps_the_mode_on(ops_in_optim):
    _loop(lambda p: torch.optim.AdamW(p, lr=1e-3), hook=True)
    assert ops_in_optim["optim"] > 0  # the user's hook runs inside the step: its ops may be theirs


def test_a_closure_keeps_the_mode_on(ops_in_optim):
    _loop(lambda p: torch.optim.LBFGS(p, max_iter=2, history_size=4), closure=True)
    assert ops_in_optim["optim"] > 0  # the closure's forward and backward, called from LBFGS.step


def test_the_mode_is_back_after_the_step_and_names_what_the_step_leaves_behind():
    kept = []
    tracker, _ = _loop(lambda p: torch.optim.AdamW(p, lr=1e-3), steps=8,
                       after_step=lambda model, x: kept.append(model(x)))  # kept with its graph
    line = f"{os.path.basename(__file__)}:"
    sites = {c.site for r in tracker.run().births for c in r.cohorts}
    assert any(s.startswith(line) for s in sites), sites


def test_losses_are_the_same_with_and_without_tracking():
    _, tracked = _loop(lambda p: torch.optim.AdamW(p, lr=1e-3))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8)
    plain = []
    for _ in range(4):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        plain.append(loss.item())
        opt.step()
    assert tracked == plain


def test_a_step_that_raises_while_the_mode_is_aside_leaves_nothing_installed():
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(RuntimeError), memleak.track(model, optimizer=opt, level="full") as tracker:
        for i in range(4):
            model(torch.randn(3, 4)).sum().backward()
            if i == 2:
                model.weight.grad = torch.ones(7)  # AdamW fails inside its step, the mode aside
            opt.step()
            opt.zero_grad()
            tracker.step()
    assert torch._C._len_torch_function_stack() == 0
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks


def test_a_mode_that_cannot_step_aside_stops_tagging_not_the_step(monkeypatch):
    def broken(self):
        raise RuntimeError("stack in an unexpected state")

    monkeypatch.setattr(tagging.Tagging, "pause", broken)
    tracker, losses = _loop(lambda p: torch.optim.AdamW(p, lr=1e-3), steps=6)
    assert len(losses) == 6 and tracker.iterations == 6
    why = [e["reason"] for e in tracker.run().events if e.get("event") == "probe_limited"]
    assert any("could not step aside" in w for w in why), why
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
