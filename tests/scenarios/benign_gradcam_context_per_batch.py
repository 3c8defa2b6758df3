"""A Grad-CAM helper built anew for every batch, as in the leak reports, but used as a context
manager: ``__enter__`` registers the forward hook (which also hangs a tensor hook on the layer
output to catch its gradient), ``__exit__`` removes the hook and drops the stored activations and
gradients. Each batch's helper, its tensors and its graph die with the ``with`` block; only the
float summary of the map is kept. Memory is flat although a helper holding activation-sized
tensors is created every step.

Real case: pytorch-grad-cam https://github.com/jacobgil/pytorch-grad-cam/issues/483 (memory grew
with a CAM object per loop iteration; the maintainer's answer: "We support a "with" clause that
should solve this") and the earlier fix of
https://github.com/jacobgil/pytorch-grad-cam/issues/132 (hooks un-registered when the CAM is
released).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class GradCAM:
    def __init__(self, model, layer):
        self.model = model
        self.layer = layer
        self.activations = []
        self.gradients = []
        self.handle = None

    def __enter__(self):
        self.handle = self.layer.register_forward_hook(self.save_activation)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        self.activations.clear()
        self.gradients.clear()

    def save_activation(self, module, inputs, output):
        self.activations.append(output.detach())

        def save_gradient(grad):
            self.gradients.insert(0, grad.detach())

        output.register_hook(save_gradient)

    def __call__(self, x, target):
        scores = self.model(x).gather(1, target[:, None]).sum()
        self.model.zero_grad()
        scores.backward()
        weights = self.gradients[0].mean(dim=0)
        return torch.relu(self.activations[-1] * weights).sum(dim=1)


def run(tracker_factory, steps=30):
    g = seed(483)
    model = MLP(hidden=192)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cam_means = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xe, ye = batch(g, n=128)
            with GradCAM(model, model.fc2) as cam:
                cam_means.append(float(cam(xe, ye).mean()))
            opt.zero_grad()
            tracker.step()
    return cam_means
