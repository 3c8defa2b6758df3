"""Whole-model snapshots taken with ``copy.deepcopy(model)`` every few steps and appended to a
list "for the ensemble at the end": each snapshot is a full copy of every parameter (they are
parameters, but of modules that are not the model being trained), kept for the whole run.

Real case: "Deepcopy of model keeps GPU memory" on Stack Overflow, answer mirrored at
https://bot.dharman.net/reports.php?id=1953130 ("If I try to keep the model, the deep copy
retains the connection to the GPU, and I cannot use assigned GPU memory"), and snapshot
ensembling loops that keep every cycle's model in memory.
"""
import copy

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "snapshots", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(69)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    snapshots = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 2 == 1:
                snapshots.append(copy.deepcopy(model))  # the leak: every snapshot kept
            tracker.step()
