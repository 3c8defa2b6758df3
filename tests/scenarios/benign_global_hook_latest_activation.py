"""An activation monitor hooks every module at once (``register_module_forward_hook``) and keeps
the latest output of each Linear layer, detached, in a dict keyed by the layer: one tensor per
layer, replaced on every forward, however long the run. Reached only through torch's dict of
global hooks, as the leaking variant is (`leak_global_hook_activation_stats`).

Real case: the fix of https://github.com/jacobgil/pytorch-grad-cam/issues/71 (the activations
list is emptied at each forward, so only the latest pass is kept) and torch's global module hooks
for "plotting or tracing & debugging" tools (https://github.com/pytorch/pytorch/pull/38972).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def install_monitor():
    """Keeps the latest output of every Linear layer, for a dashboard that polls it."""
    latest = {}

    def record(module, inputs, output):
        if isinstance(module, nn.Linear):
            latest[id(module)] = output.detach()  # replaced every forward: bounded by the layers

    return torch.nn.modules.module.register_module_forward_hook(record)


def run(tracker_factory, steps=30):
    g = seed(72)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = install_monitor()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        handle.remove()
