"""A functional training loop with ``torch.func``: the loss is a ``functional_call`` of the model
on a dict of parameters, the gradients come from ``torch.func.grad``, and the update is written
by hand, ``params = {k: p - lr * g}``. The parameter tensors were taken from
``model.named_parameters()`` and still require grad, so each update is recorded by autograd: the
new params hang off the old ones, and the chain grows every step, keeping every step's gradient
graph (``torch.func.grad`` records higher-order graph when its inputs require grad) alive.

Real case: functorch "Memory Leak" https://github.com/pytorch/functorch/issues/639 ("because the
params in the model have requires_grad=True, they'll hold onto the backprop graph and keep adding
to it instead of releasing that memory"; fix: make params not require grad, or detach).
"""
import torch
from torch import nn
from torch.func import functional_call, grad

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "params", "top": 1}


def make_step(model, lr):
    def loss_fn(params, x, y):
        return nn.functional.cross_entropy(functional_call(model, params, (x,)), y)

    grad_fn = grad(loss_fn)

    def step(params, x, y):
        grads = grad_fn(params, x, y)
        return {k: p - lr * grads[k] for k, p in params.items()}  # the leak: recorded by autograd

    return step


def run(tracker_factory, steps=30):
    g = seed(105)
    model = MLP(hidden=128)
    params = dict(model.named_parameters())  # still requires_grad=True
    step = make_step(model, 0.05)
    with tracker_factory(model) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            params = step(params, x, y)
            tracker.step()
