"""A hand-made per-sample-gradient wrapper in the style of Opacus' ``GradSampleModule``: a forward
hook on each Linear appends the layer input to ``module.activations`` and a backward hook pops it
to build ``weight.grad_sample``. The forward hook skips modules in eval mode, but not forwards run
under ``torch.no_grad()``. The loop checks a held-out batch every step with ``torch.no_grad()``
while the model stays in train mode: those forwards push activations that no backward ever pops,
so each Linear's ``activations`` list grows by one input batch per step.

Real case: Opacus "torch.no_grad() creates memory leak because of forward hook"
https://github.com/meta-pytorch/opacus/issues/176 ("When evaluating a model within a 'with
torch.no_grad():' block, when the model is still in training mode, the forward hooks will save the
activations and they will not be deleted. Setting model.eval() will fix the issue.").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "activations", "top": 1}


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
        if not module.training:  # the bug: forwards under torch.no_grad() still record
            return
        module.activations.append(inputs[0].detach())

    @staticmethod
    def capture_backprops_hook(module, grad_input, grad_output):
        a = module.activations.pop()
        b = grad_output[0].detach()
        module.weight.grad_sample = torch.einsum("ni,nj->nij", b, a)
        module.bias.grad_sample = b


def run(tracker_factory, steps=30):
    g = seed(176)
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
            with torch.no_grad():  # still in train mode: the hooks record these inputs
                monitor.append(float((model(xv).argmax(1) == yv).float().mean()))
            tracker.step()
    return sum(monitor) / len(monitor)
