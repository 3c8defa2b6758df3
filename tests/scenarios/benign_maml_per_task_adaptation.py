"""MAML done per task: every step samples a task, adapts fresh fast weights from the meta-parameters
with three differentiable inner steps (``create_graph=True``), back-propagates the query loss into
the meta-parameters and drops the fast weights. The unrolled graph is three inner steps deep and is
freed by ``backward()`` every step: memory depends on ``num_adaptation_steps``, not on how long
training runs.

Real case: tristandeleu/pytorch-maml https://github.com/tristandeleu/pytorch-maml/issues/21 ("OOM in
def adapt"; maintainer: memory scales linearly with the number of inner gradient steps, expected,
as opposed to growth over the course of training, which would be a leak).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def functional_forward(x, w):
    h = torch.relu(nn.functional.linear(x, w[0], w[1]))
    h = torch.relu(nn.functional.linear(h, w[2], w[3]))
    return nn.functional.linear(h, w[4], w[5])


def adapt(model, support, steps=3, lr=0.05):
    x, y = support
    fast = list(model.parameters())
    for _ in range(steps):
        loss = nn.functional.cross_entropy(functional_forward(x, fast), y)
        grads = torch.autograd.grad(loss, fast, create_graph=True)
        fast = [w - lr * g for w, g in zip(fast, grads)]
    return fast


def run(tracker_factory, steps=30):
    g = seed(535)
    model = MLP()
    meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    query_acc = []
    with tracker_factory(model, optimizer=meta_opt) as tracker:
        for step in range(steps):
            support, (xq, yq) = batch(g), batch(g)
            fast = adapt(model, support)
            logits = functional_forward(xq, fast)
            meta_loss = nn.functional.cross_entropy(logits, yq)
            meta_opt.zero_grad()
            meta_loss.backward()
            meta_opt.step()
            query_acc.append((logits.argmax(-1) == yq).float().mean().item())
            del fast, logits, meta_loss
            tracker.step()
