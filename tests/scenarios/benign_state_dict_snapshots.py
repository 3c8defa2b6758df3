"""A "history of weights" kept by appending ``model.state_dict()`` every few steps, without a deep
copy: the list grows by one dict of tensors each time, but every tensor in it shares its storage
with the live parameters, so memory does not grow (the snapshots are all the same weights: a
correctness bug, not a memory leak).

Real case: https://joneswong.github.io/daily/python/pytorch/2022/03/16/pytorch-mistakes-people-ignored.html
("state_dict() is shallow copy": a dict taken earlier shows the parameters' later values) and the
tutorial fix https://github.com/pytorch/tutorials/pull/188 ("Otherwise best_model_wts changes
always to last epoch's state"). A memory report must not call the growing list a leak: it adds
tensor objects, not bytes.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(47)
    model = MLP(hidden=192, d_out=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    weight_history = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, classes=8)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 2 == 1:
                weight_history.append(model.state_dict())  # aliases of the parameters
            tracker.step()
