"""The fixed version of the accumulated-loss case: ``total_loss += loss.item()`` and detached logging.

Real case: the fix in the PyTorch FAQ https://pytorch.org/docs/stable/notes/faq.html and
https://androidkt.com/how-to-calculate-running-loss-using-loss-item-in-pytorch/.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(26)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total_loss = 0.0
    losses = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
            losses.append(loss.item())
            tracker.step()
