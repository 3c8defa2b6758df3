"""A feature-capturing forward hook registered inside the training loop and never removed: the
hooks pile up on the module, one more each step, and each keeps the list it appends to.

Real case: fffasttime/MRFI https://github.com/fffasttime/MRFI/pull/5 ("Fix hook memory leak in
MRFI by tracking and exposing RemovableHandle references"): hooks registered on every
instantiation with their handles discarded accumulated closures and memory over a campaign.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "feats", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(8)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            feats = []
            model.fc2.register_forward_hook(lambda m, i, o, feats=feats: feats.append(o.detach()))
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
