"""A sharpness monitor next to the train step: every step it estimates the top Hessian eigenvalue
on a fresh batch with one power-iteration step (a Hessian-vector product from two
``torch.autograd.grad`` calls, the first with ``create_graph=True``), and appends the Rayleigh
quotient to ``sharpness_history`` to plot it later. The second ``autograd.grad`` was also written
with ``create_graph=True`` (copied from the first), so the kept quotient is a tensor whose graph
reaches back through the double-backward graph to the monitor batch's activations: every entry
keeps a whole second-order graph alive.

Real case: pytorch https://github.com/pytorch/pytorch/issues/2498 ("Memory leak in high order
derivative?": Hessian-vector products computed in a loop run out of memory after ~30 iterations)
and amirgholami/PyHessian https://github.com/amirgholami/PyHessian/issues/25 (top Hessian
eigenvalue monitoring with create_graph warnings about reference cycles and leaks).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "sharpness_history", "top": 1}


def rayleigh_quotient(model, x, y, v):
    params = [p for p in model.parameters()]
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    gv = sum((g * vi).sum() for g, vi in zip(grads, v))
    hv = torch.autograd.grad(gv, params, create_graph=True)  # the leak: create_graph copied here too
    return sum((h * vi).sum() for h, vi in zip(hv, v))


def run(tracker_factory, steps=30):
    g = seed(311)
    model = MLP(d_in=64, hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    v = [torch.randn(p.shape, generator=g) for p in model.parameters()]
    norm = torch.sqrt(sum((vi ** 2).sum() for vi in v))
    v = [vi / norm for vi in v]
    sharpness_history = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, d=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xm, ym = batch(g, n=128, d=64)
            sharpness_history.append(rayleigh_quotient(model, xm, ym, v))  # a tensor, graph and all
            tracker.step()
