"""A holder emptied or replaced between walks is judged on its growth since (detect/refills.py),
unless it is filled anew every step with more each time: a hook registered in the loop piles up."""
from __future__ import annotations

import torch
from torch import nn

import memleak
from memleak.detect.refills import anew_growing, refilled

captured: list = []


def test_a_list_filled_anew_each_step_by_hooks_that_pile_up_is_named_with_the_hook_fix():
    global captured
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handles = []
    try:
        with memleak.track(model, optimizer=opt, level="full") as tracker:
            for _ in range(30):
                captured = []  # a fresh list each step...
                # ...filled by every hook registered so far: one more each step, never removed
                handles.append(model[1].register_forward_hook(lambda m, i, o: captured.append(o.detach().clone())))
                loss = model(torch.randn(64, 16)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        for h in handles:
            h.remove()
    report = tracker.report()
    assert report.verdict.value == "leak", str(report)
    top = report.suspects[0]
    assert top.location == "captured", str(report)
    assert any("filled anew on every sampled step" in e for e in top.evidence)
    assert "handle.remove()" in top.fix


def test_a_holder_refilled_each_step_with_as_many_or_fewer_tensors_is_not_filled_anew_growing():
    steps, old, est = [1, 3, 5, 7, 9], [0.0] * 5, [0.0] * 5
    assert anew_growing([1, 2, 3, 4, 5], refilled(steps, [1, 2, 3, 4, 5], old, est))
    assert not anew_growing([4, 4, 4, 4, 4], refilled(steps, [4, 4, 4, 4, 4], old, est))  # the same each step
    assert not anew_growing([1, 2, 3, 4, 5], refilled(steps, [1, 2, 3, 4, 5], [0, 1, 2, 3, 4], est))  # it keeps
