"""A differentiable inner loop (as ``higher.innerloop_ctx`` builds) run over the whole epoch's
batches: each step takes a gradient step on the *fast* weights with ``create_graph=True`` so that
a meta-gradient can flow back through every update at the end of the epoch. The fast weights of
step n are a function of those of step n-1, their gradients and that step's activations, so the
graph behind ``fast_weights`` grows by one unrolled step every batch until the epoch ends (which a
long epoch never reaches before memory runs out).

Real case: facebookresearch/higher https://github.com/facebookresearch/higher/issues/6 ("Memory
leak when performing inner loop on a copy": ``diffopt.step(loss)`` inside ``for step, batch in
enumerate(epoch_iterator)``, allocated memory 0.7 -> 1.4 -> 12 -> 23 GB).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "fast_weights", "top": 1}


def functional_forward(x, w):
    h = torch.relu(nn.functional.linear(x, w[0], w[1]))
    h = torch.relu(nn.functional.linear(h, w[2], w[3]))
    return nn.functional.linear(h, w[4], w[5])


def run(tracker_factory, steps=30):
    g = seed(534)
    model = MLP()
    meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    inner_lr = 0.05
    epoch_len = 500  # the meta-update comes once an epoch
    with tracker_factory(model, optimizer=meta_opt) as tracker:
        fast_weights = list(model.parameters())
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(functional_forward(x, fast_weights), y)
            grads = torch.autograd.grad(loss, fast_weights, create_graph=True)
            fast_weights = [w - inner_lr * gr for w, gr in zip(fast_weights, grads)]  # the leak: unrolled for the whole epoch
            if (step + 1) % epoch_len == 0:
                xq, yq = batch(g)
                meta_loss = nn.functional.cross_entropy(functional_forward(xq, fast_weights), yq)
                meta_opt.zero_grad()
                meta_loss.backward()
                meta_opt.step()
                fast_weights = list(model.parameters())
            tracker.step()
