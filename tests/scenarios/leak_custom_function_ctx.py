"""A custom autograd Function that stores its output on ``ctx`` instead of ``ctx.save_for_backward``.

Real case: https://github.com/pytorch/pytorch/issues/25340 ("autograd contexts not being garbage
collected when assigned output Tensors as attributes") and https://github.com/pytorch/pytorch/issues/5569.
The output holds its grad_fn, the grad_fn (the ctx) holds the output: a cycle through C++ that
Python's garbage collector cannot see, so every step's output stays alive.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed


class ScaledExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp() * 0.5
        ctx.out = out  # the leak: should be ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.out


class Net(MLP):
    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        h = ScaledExp.apply(h)
        return self.head(torch.relu(self.fc2(h)))


EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "ScaledExp", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(8)
    model = Net(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
