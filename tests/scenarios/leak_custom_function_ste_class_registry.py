"""A straight-through quantiser written as a custom ``torch.autograd.Function`` records each call's
input in a class-level list (``calls``) for a histogram of pre-quantisation activations. The
input is an activation in the middle of the network, so each record keeps the step's graph up to
that point; nothing ever empties the list.

Real case: https://github.com/pytorch/pytorch/issues/5569 ("torch.autograd.Function memory leak";
tensors kept on the Function instead of ``save_for_backward``) and
https://github.com/dmlc/dgl/pull/1060 (tensors stashed on ``ctx`` attributes kept alive).
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "calls", "top": 1}


class STEQuantize(torch.autograd.Function):
    calls = []

    @staticmethod
    def forward(ctx, x, scale):
        STEQuantize.calls.append(x)  # the leak: the pre-quantisation activation, graph and all
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class QuantMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, 256)
        self.fc2 = nn.Linear(256, 256)
        self.head = nn.Linear(256, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = STEQuantize.apply(h, 16.0)
        h = torch.relu(self.fc2(h))
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(519)
    STEQuantize.calls = []
    model = QuantMLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=96)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
