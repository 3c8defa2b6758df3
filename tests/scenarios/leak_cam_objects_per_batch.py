"""A Grad-CAM helper built anew for every batch: each one registers its bound-method hooks on the
target layer and never removes them, so the old helpers stay alive through the layer's hook dicts
and keep appending every later batch's activations and gradients.

Real case: pytorch-grad-cam https://github.com/jacobgil/pytorch-grad-cam/issues/132 ("Memory
leakage when calling multiple instances in a loop ... the memory is cumulatively being built up
even after I delete the object"; the ``ActivationsAndGradients`` hooks were never un-registered)
and https://github.com/jacobgil/pytorch-grad-cam/issues/483 (fixed by a ``with`` block that
releases the hooks).
"""
import torch

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "ActivationsAndGradients", "top": 1}


class ActivationsAndGradients:
    """Keeps the target layer's activations and gradients for one CAM call (as pytorch-grad-cam 1.2 did)."""

    def __init__(self, layer):
        self.activations = []
        self.gradients = []
        layer.register_forward_hook(self.save_activation)  # the leak: the handles are dropped
        layer.register_full_backward_hook(self.save_gradient)

    def save_activation(self, module, inputs, output):
        self.activations.append(output.detach())

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = [grad_output[0].detach(), *self.gradients]


def cam_map(model, x):
    """One class-activation map: a new hook helper per call, as the issue's loop made one per batch."""
    helper = ActivationsAndGradients(model.fc2)
    score = model(x).max(dim=1).values.sum()
    model.zero_grad()
    score.backward()
    weights = helper.gradients[0].mean(dim=0)
    return torch.relu(helper.activations[-1] * weights).sum(dim=1)


def run(tracker_factory, steps=30):
    g = seed(31)
    model = MLP(hidden=96)
    model.eval()
    maps = 0.0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=48)
            maps += float(cam_map(model, x).mean())
            tracker.step()
