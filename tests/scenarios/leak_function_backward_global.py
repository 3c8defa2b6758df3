"""A custom ``autograd.Function`` whose ``backward`` keeps the incoming gradient on a module-level
list "for future use": ``ctx`` is used correctly (``save_for_backward``), but every backward pass
appends one more gradient tensor to the global, which nothing ever empties.

Real case: https://discuss.pytorch.org/t/save-the-gradient-of-the-intermediate-tensor/190094
(an ``Exp`` Function that does ``a.append(grad_output.detach())`` in ``backward`` to keep the
gradient of an intermediate tensor), the pattern behind
https://github.com/pytorch/pytorch/issues/5569 (tensors kept by a custom Function outlive the
step). The Function sits between two layers, so its gradient is a full activation-sized tensor.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "intermediate_grads", "top": 1}

#: gradients of the gated activations, kept for an analysis that never runs (the leak)
intermediate_grads = []


class Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.sigmoid(x) * x
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        intermediate_grads.append(grad_output.detach())  # the leak: one tensor per step
        s = torch.sigmoid(x)
        return grad_output * (s + x * s * (1 - s))


class GatedMLP(MLP):
    def forward(self, x):
        h = Gate.apply(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(42)
    model = GatedMLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    intermediate_grads.clear()
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
        intermediate_grads.clear()
