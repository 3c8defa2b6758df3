"""An AdaHessian-style optimizer whose ``step()`` is not decorated with ``@torch.no_grad()``.
The loop calls ``loss.backward(create_graph=True)`` (the Hessian-vector product needs the
gradients' graph), the optimizer draws a Rademacher vector and computes ``hvs =
torch.autograd.grad(grads, params, grad_outputs=v, retain_graph=True)``, then updates its moments
in place: ``exp_avg.mul_(beta1).add_(grad, ...)``. ``grad`` carries its double-backward graph, and
``step`` runs with grad mode on, so each in-place ``add_`` turns ``exp_avg`` into the head of a
graph that reaches that step's ``grad`` -- and, through the previous ``exp_avg`` it was updated
from, every earlier step's. ``retain_graph=True`` keeps the buffers those graphs saved (the
activations of each batch). ``opt.zero_grad()`` resets ``.grad`` to None, which breaks the
parameter/gradient cycle the ``create_graph`` warning is about, but not the chain in the state.

Real case: jettify/pytorch-optimizer https://github.com/jettify/pytorch-optimizer/issues/358
("GPU memory leak in adahessian optimizer?": memory increases until it is all used, traced to
``get_trace``'s ``retain_graph=True``; the reporter also advises "a ``@torch.no_grad()`` decorator
before each routine") and https://github.com/jettify/pytorch-optimizer/issues/540 ("How to stop
memory leak while using adahessian?").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "opt.state", "top": 1}


class AdaHessianLite(torch.optim.Optimizer):
    def __init__(self, params, lr=0.05, betas=(0.9, 0.999), eps=1e-4, seed=0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.generator = torch.Generator().manual_seed(seed)

    def get_trace(self, params, grads):
        vs = [torch.randint(0, 2, p.shape, generator=self.generator).to(p.dtype) * 2 - 1 for p in params]
        hvs = torch.autograd.grad(grads, params, grad_outputs=vs, only_inputs=True,
                                  retain_graph=True)  # as in the report; False would free the buffers
        return [hv.abs() for hv in hvs]

    def step(self, closure=None):  # the leak: no @torch.no_grad(), and grads carry a graph
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            hut_traces = self.get_trace(params, grads)
            beta1, beta2 = group["betas"]
            for p, grad, hut in zip(params, grads, hut_traces):
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p.data)
                    state["exp_hessian_diag_sq"] = torch.zeros_like(p.data)
                state["step"] += 1
                exp_avg, exp_h = state["exp_avg"], state["exp_hessian_diag_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_h.mul_(beta2).addcmul_(hut, hut, value=1 - beta2)
                bc1 = 1 - beta1 ** state["step"]
                bc2 = 1 - beta2 ** state["step"]
                denom = (exp_h / bc2).sqrt().add_(group["eps"])
                p.data.addcdiv_(exp_avg.data, denom.data, value=-group["lr"] / bc1)


def run(tracker_factory, steps=30):
    g = seed(5801)
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
