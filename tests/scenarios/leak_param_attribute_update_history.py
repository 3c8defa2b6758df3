"""Update-to-weight monitoring that stores each step's update as a Python attribute ON the Parameter.

Real case: https://github.com/pytorch/pytorch/pull/89176 (optimizer step hooks; the review suggests a
callback "that records some state") and https://github.com/pytorch/pytorch/issues/88446. A step
pre-hook snapshots the weights; a post-hook computes ``p - before`` and appends it to
``p.update_history`` (an attribute set on each ``nn.Parameter`` object) for a ratio plot; nothing
trims it.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "update_history", "top": 1}


def attach_update_monitor(opt):
    before = {}

    def pre(optimizer, args, kwargs):
        for grp in optimizer.param_groups:
            for p in grp["params"]:
                before[p] = p.detach().clone()

    @torch.no_grad()
    def post(optimizer, args, kwargs):
        for grp in optimizer.param_groups:
            for p in grp["params"]:
                if not hasattr(p, "update_history"):
                    p.update_history = []
                p.update_history.append(p.detach() - before[p])  # the leak: one update per step per parameter
        before.clear()

    return opt.register_step_pre_hook(pre), opt.register_step_post_hook(post)


def run(tracker_factory, steps=30):
    g = seed(303)
    model = MLP(hidden=96)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    handles = attach_update_monitor(opt)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        for h in handles:
            h.remove()
