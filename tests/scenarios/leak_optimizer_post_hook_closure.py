"""An optimizer step post-hook closure that appends the first layer's weights to a list it closes over.

Real case: https://github.com/pytorch/pytorch/issues/88446 ("[RFC] Implement hooks for Optimizer.step")
and the recording callback suggested in its PR https://github.com/pytorch/pytorch/pull/89176
(``logged.append(...)`` inside the hook). Here ``make_weight_tracer`` returns a hook whose closure
cell ``weight_trace`` gets a clone of ``fc1.weight`` after every step, to animate the filters later;
the hook lives in ``opt._optimizer_step_post_hooks`` and nothing else references the list.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "weight_trace", "top": 1}


def make_weight_tracer(layer):
    weight_trace = []

    def hook(optimizer, args, kwargs):
        weight_trace.append(layer.weight.detach().clone())  # the leak: one copy per step

    return hook


def run(tracker_factory, steps=30):
    g = seed(304)
    model = MLP(d_in=256, hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = opt.register_step_post_hook(make_weight_tracer(model.fc1))
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, d=256)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        handle.remove()
