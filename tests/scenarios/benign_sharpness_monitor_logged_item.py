"""The fixed form of ``leak_sharpness_monitor_hvp_history``: the same per-step sharpness monitor
(one power-iteration step, a Hessian-vector product from two ``torch.autograd.grad`` calls, the
first with ``create_graph=True``), but the second call does not create a graph and the Rayleigh
quotient is stored with ``.item()``: the history grows by one Python float a step and every
second-order graph is freed when the monitor returns.

Real case: the fix for the pattern in https://github.com/pytorch/pytorch/issues/2498 ("Memory leak
in high order derivative?") and the PyTorch FAQ advice
https://pytorch.org/docs/stable/notes/faq.html (store ``.item()`` of tensors kept for statistics).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def rayleigh_quotient(model, x, y, v):
    params = [p for p in model.parameters()]
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    gv = sum((g * vi).sum() for g, vi in zip(grads, v))
    hv = torch.autograd.grad(gv, params)
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
            sharpness_history.append(rayleigh_quotient(model, xm, ym, v).item())
            tracker.step()
