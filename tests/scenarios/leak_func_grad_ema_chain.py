"""A functional training step with ``torch.func``: the gradients come from
``torch.func.grad(loss_fn)(params, x, y)`` over a dict of parameters taken from
``model.named_parameters()``, copied into ``p.grad`` (detached) for a regular optimizer. For a
gradient-noise-scale monitor the step also keeps an exponential moving average of the gradients,
``grad_ema[k] = 0.9 * grad_ema[k] + 0.1 * g``. The parameters still require grad, so
``torch.func.grad`` returns gradients that carry an outer autograd graph (it records higher-order
history when its inputs require grad); the EMA, computed outside ``torch.no_grad()``, chains each
step's graph onto the previous one: the moving average keeps every step's gradient graph and the
activations it saved.

Real case: functorch "Memory Leak" https://github.com/pytorch/functorch/issues/639 ("because the
params in the model have requires_grad=True, they'll hold onto the backprop graph and keep adding
to it instead of releasing that memory"; fix: make params not require grad, or detach), here with
the graph carried by a running statistic of the gradients rather than by the parameters.
"""
import torch
from torch import nn
from torch.func import functional_call, grad

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "grad_ema", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(5605)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    params = dict(model.named_parameters())  # still require grad

    def loss_fn(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x,)), y)

    grad_ema = {k: torch.zeros_like(v) for k, v in params.items()}
    noise_scale = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            grads = grad(loss_fn)(params, x, y)
            for k, p in model.named_parameters():
                p.grad = grads[k].detach()
            opt.step()
            for k, gk in grads.items():
                grad_ema[k] = 0.9 * grad_ema[k] + 0.1 * gk  # the leak: gk carries a graph
            with torch.no_grad():
                sq = sum((gk - grad_ema[k]).pow(2).sum() for k, gk in grads.items())
            noise_scale.append(sq.item())
            tracker.step()
