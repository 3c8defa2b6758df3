"""Forward hooks (for an attribution method) store each layer's detached input and output on the
module as ``module.input`` / ``module.output``; each call overwrites the previous step's, so one
step's activations are held at a time, never more.

Real case: https://github.com/jmschrei/tangermeme/pull/84 (``module.input`` and ``module.output``
store detached input and activations ... kept until the module is cleared): a bounded hold of the
last call, not per-step growth.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def _store_io(module, inputs, output):
    module.input = inputs[0].detach()
    module.output = output.detach()


def run(tracker_factory, steps=30):
    g = seed(525)
    model = MLP(hidden=256)
    handles = [m.register_forward_hook(_store_io) for m in model.modules() if isinstance(m, nn.Linear)]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    for h in handles:
        h.remove()
