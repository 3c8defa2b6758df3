"""A prefetching batch generator keeps every batch it moved to the device in its own local list.

Real case: https://github.com/justheuristic/prefetch_generator/issues/8 ("memory leak in a loop":
replacing the DataLoader by a background prefetch generator makes memory grow over time) and
https://github.com/IgorSusmelj/pytorch-styleguide/issues/13. Here ``prefetch`` keeps ``staged``
(meant for a second "hard examples" pass) and the loop iterates it with ``for x, y in
prefetch(...)``: the generator is not in any variable, only on the loop's iterator stack, and its
suspended frame holds the list.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "staged", "top": 1}


def prefetch(g, n, device=None):
    device = device or torch.get_default_device()
    staged = []
    for _ in range(n):
        x, y = batch(g, n=128)
        x, y = x.to(device), y.to(device)
        staged.append((x, y))  # the leak: kept for a second pass that never comes
        yield x, y


def run(tracker_factory, steps=30):
    g = seed(33)
    model = MLP(hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for x, y in prefetch(g, steps):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
