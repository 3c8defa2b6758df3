"""A layer-backward tracker in the style of ``torch.utils.module_tracker.ModuleTracker``: a
forward hook on each Linear layer registers, on every forward,
``torch.autograd.graph.register_multi_grad_hook`` over the layer's *output* tensors, which fires
when the layer's backward starts and records the layer's name and the gradient's norm (a float).
A new hook every step and closures over the layer's output look like hook accumulation, but the
hooks live on the step's activations (non-leaf tensors), not on the parameters: they are freed
with the step's graph after ``backward()``. Memory is flat.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/pull/139214 (``ModuleTracker``
registers multi-grad hooks on each module's inputs and outputs in its forward hooks; memory
settles once nothing keeps those tensors) and the multi-grad hook design in
https://github.com/pytorch/pytorch/issues/83617.
"""
import torch
from torch import nn
from torch.autograd.graph import register_multi_grad_hook

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class LayerBackwardTracker:
    def __init__(self):
        self.order = []
        self.grad_norms = {}

    def attach(self, model):
        handles = []
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Linear):
                handles.append(mod.register_forward_hook(self._post_hook(name)))
        return handles

    def _post_hook(self, name):
        def post_hook(module, inputs, output):
            def on_backward(grads):
                self.order.append(name)
                del self.order[:-8]
                self.grad_norms[name] = grads[0].norm().item()

            if output.requires_grad:
                register_multi_grad_hook((output,), on_backward)
        return post_hook


def run(tracker_factory, steps=30):
    g = seed(5807)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tracker_ = LayerBackwardTracker()
    handles = tracker_.attach(model)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        for h in handles:
            h.remove()
