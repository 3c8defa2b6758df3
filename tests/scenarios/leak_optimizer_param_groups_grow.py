"""A fresh adapter layer is built inside the loop and handed to the optimizer with
``add_param_group`` every step: the user's variable is rebound, but the optimizer's
``param_groups`` keep every old layer's parameters and Adam keeps ``exp_avg``/``exp_avg_sq`` for
each in ``opt.state``, so memory grows by a layer (three times over) a step, held only by the
optimizer.

Real case: https://github.com/nerfstudio-project/gsplat/pull/931 (an old ``Parameter`` replaced
during densification stays alive through the optimizer's ``state`` key and
``param_groups["params"]``), and https://github.com/DrChainsaw/NaiveNASflux.jl/issues/18
("Memory leak with stateful optimizers": parameter arrays replaced with new instances, so the
optimizer's per-parameter state "just keeps getting new entries").
"""
import torch
from torch import nn

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "opt.param_groups", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(91)
    model = MLP(d_in=256, hidden=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            adapter = nn.Linear(DIM, 256)  # meant to be built once, before the loop
            opt.add_param_group({"params": adapter.parameters(), "lr": 1e-3})  # the leak: a group a step
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(adapter(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
