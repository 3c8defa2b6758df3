"""A live-plot panel that registers a redraw callback every iteration, a ``functools.partial``
bound to a snapshot of the current reconstruction, and never releases the old ones: the list of
callbacks keeps every snapshot.

Real case: cdtools https://github.com/cdtools-developers/cdtools/pull/87 ("Fix a memory leak in
the plotting": "callbacks which closed over stale tensors that would never be released"; the fix
releases the callbacks registered during each iteration).
"""
import functools

import torch
from torch import nn

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "callbacks", "top": 1}


def redraw(name, image, ax=None):
    return float(image.abs().mean())


class Panel:
    def __init__(self):
        self.callbacks = []

    def connect(self, fn):
        self.callbacks.append(fn)  # the leak: never disconnected

    def refresh(self):
        return self.callbacks[-1]()


def run(tracker_factory, steps=30):
    g = seed(63)
    model = MLP(hidden=128, d_out=DIM)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    panel = Panel()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, _ = batch(g, n=64)
            recon = model(x)
            loss = nn.functional.mse_loss(recon, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            panel.connect(functools.partial(redraw, "object", recon.detach().clone()))
            panel.refresh()
            tracker.step()
