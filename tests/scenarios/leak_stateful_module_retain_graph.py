"""A module keeps a running state on ``self`` that is never detached; ``retain_graph=True`` hides the error.

Real case: the forum answer https://discuss.pytorch.org/t/how-to-debug-causes-of-gpu-memory-leaks/6741/22
(a tensor kept from a previous computation holds its whole graph) and the retain_graph discussion
in https://discuss.pytorch.org/t/runtimeerror-trying-to-backward-through-the-graph-a-second-time-but-the-buffers-have-already-been-freed-specify-retain-graph-true-when-calling-backward-the-first-time/6795.
Each step's graph is linked to the previous one through ``smoother.state``.
"""
import torch
from torch import nn

from ._common import DIM, MLP, batch, seed


class Smoother(nn.Module):
    """Input normalisation with a running mean kept on self (like a hand-written BatchNorm)."""

    def __init__(self, d=DIM):
        super().__init__()
        self.state = torch.zeros(d)

    def forward(self, x):
        self.state = 0.9 * self.state + 0.1 * x.mean(0)  # the leak: should use x.mean(0).detach()
        return x - self.state


EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "smoother.state", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(7)
    model = nn.Sequential()
    model.add_module("smoother", Smoother())
    model.add_module("net", MLP())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            x.requires_grad_(True)  # input gradients for a saliency penalty
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            saliency = x.grad.abs().mean().item()
            tracker.step()
