"""Each batch's class probabilities extended row by row into one list for the whole run
(``all_probs.extend(probs)``, what iterating a tensor gives: a view per row). The list has a
row per sample, and every row is a view that keeps its whole batch's tensor alive: the list
grows by a batch of memory each step, held in views the walk samples only at the list's ends.

Real case: https://github.com/sktime/pytorch-forecasting/pull/2086 (PredictCallback appended each
batch's outputs to lists for the whole prediction epoch: "monotonic GPU memory growth") and
https://github.com/fastai/fastai/pull/483 (predictions gathered for a large data set ran out of
memory until each batch was converted as it came).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "all_probs", "top": 1}


def predict(model, x):
    with torch.no_grad():
        return list(model(x).softmax(-1))  # one view per row of the batch's tensor


def run(tracker_factory, steps=30):
    g = seed(67)
    model = MLP(hidden=96, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    all_probs = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64, classes=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            all_probs.extend(predict(model, x))  # the leak: rows kept, each keeping its batch
            tracker.step()
    return all_probs
