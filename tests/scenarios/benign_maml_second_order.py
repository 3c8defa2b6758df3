"""Second-order MAML done right: the inner loop uses ``torch.autograd.grad(..., create_graph=True)``
so the meta-gradient flows through the adaptation, the fast weights are local to ``meta_step``,
and only ``meta_loss.item()`` is logged. The second-order graph is large but freed by each
meta-step's ``backward()``: memory rises within a step and is flat from step to step.

Real case: pytorch-maml https://github.com/tristandeleu/pytorch-maml/issues/21 (the maintainer:
memory that scales with ``num_adaptation_steps`` at the first iteration is expected; only growth
over the course of training would be a leak) and
https://github.com/wyharveychen/CloserLookFewShot/issues/62 (``create_graph=True`` blamed for
growth; resolved as an environment problem).
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def functional_mlp(x, w):
    h = torch.relu(x @ w[0].t() + w[1])
    return h @ w[2].t() + w[3]


def run(tracker_factory, steps=30):
    g = seed(113)
    net = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 5))
    weights = list(net.parameters())
    opt = torch.optim.Adam(weights, lr=1e-3)
    history = []

    def adapt(xs, ys):
        fast = list(weights)
        for _ in range(3):
            loss = nn.functional.cross_entropy(functional_mlp(xs, fast), ys)
            grads = torch.autograd.grad(loss, fast, create_graph=True)
            fast = [w - 0.1 * gr for w, gr in zip(fast, grads)]
        return fast

    with tracker_factory(net, optimizer=opt) as tracker:
        for _ in range(steps):
            opt.zero_grad()
            meta_loss = 0.0
            for _ in range(2):
                xs, xq = torch.randn(25, DIM, generator=g), torch.randn(25, DIM, generator=g)
                ys, yq = torch.randint(0, 5, (25,), generator=g), torch.randint(0, 5, (25,), generator=g)
                meta_loss = meta_loss + nn.functional.cross_entropy(functional_mlp(xq, adapt(xs, ys)), yq)
            meta_loss.backward()
            opt.step()
            history.append(meta_loss.item())
            tracker.step()
