"""An activation-statistics tool hooks every module at once (``register_module_forward_hook``)
and keeps each Linear layer's output for a histogram at the end of training, outputs and their
autograd graphs included, in a list only the hook's closure holds: nothing of the user's loop,
model or module globals reaches it, only torch's own dict of global hooks.

Real case: torch's global module hooks were added for "plotting or tracing & debugging" tools
(https://github.com/pytorch/pytorch/pull/38972, and the modules note
https://github.com/pytorch/pytorch/pull/51536: "very useful when building profiling or
visualization tools"); hooks that save activations and never free them are
https://github.com/jacobgil/pytorch-grad-cam/issues/71 and
https://github.com/meta-pytorch/opacus/issues/176.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "outputs", "top": 1}


def install_stats():
    """Starts recording what every Linear layer outputs, for histograms when training ends."""
    outputs = []

    def record(module, inputs, output):
        if isinstance(module, nn.Linear):
            outputs.append(output)  # the leak: no .detach().cpu(), nothing ever cleared

    return torch.nn.modules.module.register_module_forward_hook(record)


def run(tracker_factory, steps=30):
    g = seed(71)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = install_stats()
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
