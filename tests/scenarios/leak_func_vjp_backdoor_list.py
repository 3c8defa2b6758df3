"""A functional training loop built on ``torch.func.vjp`` splits forward and backward: the forward
returns the loss and a ``vjp_fn``, which is stashed in a module-level ``backdoor`` list so the
backward step (written elsewhere) can pick up "the latest one" with ``backdoor[-1]``. Nothing ever
pops the list: every step's ``vjp_fn`` stays alive, and each keeps that step's saved forward
tensors (the activations of the batch) for a backward that already ran.

Real case: Opacus "functorch mode recomputes the forward twice"
https://github.com/meta-pytorch/opacus/issues/521, where the suggested sketch passes state from the
forward to the backward this way (``backdoor.append(vjp_fn)`` in the forward,
``backdoor[-1](grad_out)`` in the backward, the list never emptied), and functorch "Memory Leak"
https://github.com/pytorch/functorch/issues/639 (functional training keeping old graphs alive).
"""
import torch
from torch import nn
from torch.func import functional_call, vjp

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "backdoor", "top": 1}

backdoor = []


def forward(model, params, x, y):
    def loss_fn(p):
        return nn.functional.cross_entropy(functional_call(model, p, (x,)), y)

    loss, vjp_fn = vjp(loss_fn, params)
    backdoor.append(vjp_fn)  # the leak: never popped
    return loss


def backward(loss):
    (grads,) = backdoor[-1](torch.ones_like(loss))
    return grads


def run(tracker_factory, steps=30):
    g = seed(521)
    model = MLP(hidden=192)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    lr = 0.05
    del backdoor[:]
    try:
        with tracker_factory(model) as tracker:
            for step in range(steps):
                x, y = batch(g, n=128)
                loss = forward(model, params, x, y)
                grads = backward(loss)
                with torch.no_grad():
                    for k in params:
                        params[k].sub_(lr * grads[k])
                tracker.step()
    finally:
        del backdoor[:]
