"""An LBFGS closure that records every loss it evaluates as a tensor (with its graph).

Real case: https://github.com/StanfordASL/neural-network-lyapunov/pull/140 ("Fix the memory leak
when calling line search ... closure should return only loss, and losses list only stores the
float value, not the tensor"). LBFGS evaluates the closure several times a step, and keeps its own
curvature history in lists in its state (bounded by ``history_size``): torch's, not the leak.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "evals", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(15)
    model = MLP()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    evals = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)

            def closure():
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                evals.append(loss)  # the leak: evals.append(loss.item())
                return loss

            opt.step(closure)
            tracker.step()
