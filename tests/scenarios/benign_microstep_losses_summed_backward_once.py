"""Gradient accumulation written as "sum the micro-batch losses, call backward once": each
micro-step adds its loss to ``accum_loss`` (a tensor with its graph), so the activations of every
micro-batch stay alive until the accumulation boundary. Memory rises step after step for 6
micro-steps, which looks like the classic ``total_loss += loss`` leak, but at the boundary
``accum_loss.backward()`` frees all the graphs and ``accum_loss`` is reset: a sawtooth, bounded by
one accumulation window.

Real case: PyTorch forum "PyTorch gradient accumulation"
https://discuss.pytorch.org/t/pytorch-gradient-accumulation/55955 (accumulating with a backward per
micro-batch against summing the losses and calling backward once, which keeps every micro-batch's
graph until the backward).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
ACCUM = 6


def run(tracker_factory, steps=30):
    g = seed(5106)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    accum_loss = 0.0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256)
            accum_loss = accum_loss + nn.functional.cross_entropy(model(x), y) / ACCUM
            if step % ACCUM == ACCUM - 1:
                opt.zero_grad()
                accum_loss.backward()
                opt.step()
                accum_loss = 0.0
            tracker.step()
