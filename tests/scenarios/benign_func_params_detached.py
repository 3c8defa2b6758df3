"""The fixed version of a ``torch.func`` training loop: the parameter dict is detached before the
loop (``{k: v.detach()}``), gradients come from ``torch.func.grad`` over ``functional_call``, and
the hand-written update rebinds ``params`` each step. Nothing requires grad outside the transform,
so each step's tensors die with it: memory is flat. The per-sample gradient norm for clipping
statistics is computed with ``vmap(grad(...))`` and only its mean kept as a float.

Real case: functorch https://github.com/pytorch/functorch/issues/639 (the leak when params keep
``requires_grad=True``; the maintainers' fix: "make params not require_grad" / use
``make_functional(..., disable_autograd_tracking=True)``).
"""
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(106)
    model = MLP(hidden=128)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x,)), y)

    def one_sample_loss(p, x, y):
        return loss_fn(p, x[None], y[None])

    grad_fn = grad(loss_fn)
    per_sample = vmap(grad(one_sample_loss), in_dims=(None, 0, 0))
    norm_log = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            grads = grad_fn(params, x, y)
            params = {k: p - 0.05 * grads[k] for k, p in params.items()}
            if step % 5 == 0:
                ps = per_sample(params, x[:16], y[:16])
                norms = torch.stack([v.flatten(1).norm(dim=1) for v in ps.values()]).norm(dim=0)
                norm_log.append(norms.mean().item())
            tracker.step()
