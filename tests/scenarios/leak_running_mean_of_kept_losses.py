"""Losses kept in a list as tensors, and their running mean recomputed from the whole list every
step for the progress bar. The mean is a fresh tensor each step, but its graph reaches every
loss the list keeps (and their graphs), so it grows with the list: the list is what to fix; the
mean follows (it is never built on the previous mean, so it carries no chain of its own).

Real case: https://github.com/RUCAIBox/RecBole/pull/307 ("bug of storing loss in each batch cause
out of memory in Trainer": the losses were kept as tensors for the epoch's average) and
https://github.com/jokester-zzz/SSA-SC/issues/2 ("The way of updating training and validation loss
results in the continuous rising of gpu memory ... it should be loss[key].item()").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "losses", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(53)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)  # the leak: each loss with its graph
            mean = sum(losses) / len(losses)  # for the progress bar: grows with the list
            tracker.step()
    return mean
