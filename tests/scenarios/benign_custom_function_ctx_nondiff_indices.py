"""A top-k pooling written as a custom ``torch.autograd.Function`` returns the pooled values and
the indices it picked, marks the indices non-differentiable (``ctx.mark_non_differentiable``) and
keeps them on ``ctx`` as an attribute (``ctx.idx = idx``) for the backward scatter, together with
the input's shape. Storing a Function's *output* on ``ctx`` is the classic leak (the output's
``grad_fn`` is the ctx: a cycle), but a non-differentiable output has no ``grad_fn``: no cycle,
and the ctx, the indices and the step's graph go with the step. Memory is flat.

Real case: the custom-Function docs' advice to keep tensors with ``save_for_backward`` "to prevent
incorrect gradients and memory leaks" (https://github.com/pytorch/pytorch/issues/25340 is the cycle
this would be if the output were differentiable), and the non-differentiable-index pattern of
"Backprop through argmax" https://github.com/pytorch/pytorch/issues/1339 (indices carry no gradient).
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class TopKPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        values, idx = x.topk(k, dim=1)
        ctx.mark_non_differentiable(idx)
        ctx.idx = idx  # an output, but with no grad_fn: no cycle
        ctx.shape = x.shape
        return values, idx

    @staticmethod
    def backward(ctx, g_values, g_idx):
        grad = torch.zeros(ctx.shape, dtype=g_values.dtype, device=g_values.device)
        return grad.scatter(1, ctx.idx, g_values), None


class Net(nn.Module):
    def __init__(self, hidden=512, k=64):
        super().__init__()
        self.k = k
        self.fc1 = nn.Linear(DIM, hidden)
        self.head = nn.Linear(k, 4)

    def forward(self, x):
        values, idx = TopKPool.apply(torch.relu(self.fc1(x)), self.k)
        return self.head(values), idx


def run(tracker_factory, steps=30):
    g = seed(5606)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    picked = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            logits, idx = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            picked.append(int(idx[0, 0]))
            tracker.step()
