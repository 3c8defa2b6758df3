"""Iterative magnitude pruning done the healthy way: every few steps a layer is pruned with
``prune.l1_unstructured`` and at once made permanent with ``prune.remove``, so the module keeps
one weight and nothing piles up on its hooks.

Real case: PyTorch's pruning tutorial (https://github.com/pytorch/tutorials/pull/605,
"Iterative Pruning" then "Remove pruning re-parametrization"), and the ``prune`` then
``prune.remove`` pattern of https://github.com/pytorch/pytorch/issues/33618.
"""
import torch
from torch import nn
from torch.nn.utils import prune

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(65)
    model = MLP(d_in=DIM, hidden=192)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 2 == 1:
                with torch.no_grad():
                    for layer in (model.fc1, model.fc2):
                        prune.l1_unstructured(layer, "weight", amount=0.01)
                        prune.remove(layer, "weight")  # permanent: no mask, no hook left
            tracker.step()
