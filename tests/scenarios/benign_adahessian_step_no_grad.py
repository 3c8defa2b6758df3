"""AdaHessian done as the fix for the leaky report says: ``step()`` runs under
``@torch.no_grad()`` and the Hessian-vector product is taken with ``retain_graph=False``. The loop
still calls ``loss.backward(create_graph=True)`` each step (PyTorch warns about a reference cycle
between each parameter and its gradient), and the optimizer keeps per-parameter moments that it
updates from those graph-carrying gradients; but the moments are updated with grad mode off, so
they never join a graph, the Hessian-vector product frees the double-backward buffers, and
``opt.zero_grad()`` (``set_to_none``) breaks the parameter/gradient cycle. Memory is flat.

Real case: jettify/pytorch-optimizer https://github.com/jettify/pytorch-optimizer/issues/358
(the leak is fixed by ``retain_graph=False`` in ``get_trace`` and ``@torch.no_grad()`` on the
optimizer's routines) and the ``create_graph`` warning discussed in
https://github.com/amirgholami/PyHessian/issues/25.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class AdaHessianLite(torch.optim.Optimizer):
    def __init__(self, params, lr=0.05, betas=(0.9, 0.999), eps=1e-4, seed=0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.generator = torch.Generator().manual_seed(seed)

    def get_trace(self, params, grads):
        vs = [torch.randint(0, 2, p.shape, generator=self.generator).to(p.dtype) * 2 - 1 for p in params]
        hvs = torch.autograd.grad(grads, params, grad_outputs=vs, only_inputs=True, retain_graph=False)
        return [hv.abs() for hv in hvs]

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            hut_traces = self.get_trace(params, grads)
            beta1, beta2 = group["betas"]
            for p, grad, hut in zip(params, grads, hut_traces):
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_hessian_diag_sq"] = torch.zeros_like(p)
                state["step"] += 1
                exp_avg, exp_h = state["exp_avg"], state["exp_hessian_diag_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_h.mul_(beta2).addcmul_(hut, hut, value=1 - beta2)
                bc1 = 1 - beta1 ** state["step"]
                bc2 = 1 - beta2 ** state["step"]
                denom = (exp_h / bc2).sqrt().add_(group["eps"])
                p.addcdiv_(exp_avg, denom, value=-group["lr"] / bc1)


def run(tracker_factory, steps=30):
    g = seed(5802)
    model = MLP(hidden=96)
    opt = AdaHessianLite(model.parameters())
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward(create_graph=True)
            opt.step()
            tracker.step()
