"""The first row of each batch's features is kept for later inspection as a slice: each 4 KiB
view keeps its whole batch tensor alive.

Real case: https://github.com/konstmish/prodigy/pull/22 ("Slicing creates a view to the original
data, keeping the original data in memory ... be sure it's not just views, so that the original
data can be garbage collected"). The features are computed under no_grad, so no autograd graph is
involved: only the views' bases grow.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "first_rows", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(41)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first_rows = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                features = torch.randn(512, 512, generator=g) @ torch.randn(512, 256, generator=g)
            first_rows.append(features[0])  # the leak: features[0].clone() keeps 1 KiB, not 512 KiB
            tracker.step()
