"""A hand-made Opacus-style ``GradSampleModule``: forward hooks append each Linear's input to
``module.activations``, backward hooks pop it and store a per-sample gradient (a batch x out x in
tensor, the largest thing alive) on ``weight.grad_sample``. The held-out check runs with
``model.eval()`` and ``torch.no_grad()``, so the forward hooks record nothing there, every pushed
activation is popped by the next backward, and each ``grad_sample`` is overwritten every step.
Module attributes holding activation lists and big per-sample tensors, refilled every step, but
bounded.

Real case: the fix given in Opacus https://github.com/meta-pytorch/opacus/issues/176 ("Setting
model.eval() will fix the issue": in eval mode the forward hooks do not save activations).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class GradSampleModule(nn.Module):
    def __init__(self, module):
        super().__init__()
        self._module = module
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                layer.activations = []
                layer.register_forward_hook(self.capture_activations_hook)
                layer.register_full_backward_hook(self.capture_backprops_hook)

    def forward(self, x):
        return self._module(x)

    @staticmethod
    def capture_activations_hook(module, inputs, output):
        if not module.training:
            return
        module.activations.append(inputs[0].detach())

    @staticmethod
    def capture_backprops_hook(module, grad_input, grad_output):
        a = module.activations.pop()
        b = grad_output[0].detach()
        module.weight.grad_sample = torch.einsum("ni,nj->nij", b, a)
        module.bias.grad_sample = b


def run(tracker_factory, steps=30):
    g = seed(1760)
    model = GradSampleModule(MLP(hidden=96))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    monitor = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=32)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xv, yv = batch(g, n=128)
            model.eval()
            with torch.no_grad():
                monitor.append(float((model(xv).argmax(1) == yv).float().mean()))
            model.train()
            tracker.step()
    return sum(monitor) / len(monitor)
