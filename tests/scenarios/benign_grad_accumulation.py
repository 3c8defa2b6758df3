"""Gradient accumulation over 4 micro-batches: a sawtooth, not a leak.

Real case: gradient accumulation with a loss scaler, https://github.com/HorizonRobotics/alf/pull/1780,
and the PyTorch AMP examples it cites ("working with scaled gradients").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=32):
    g = seed(21)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    running = 0.0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y) / 4
            loss.backward()
            running += loss.item()
            if step % 4 == 3:
                opt.step()
                opt.zero_grad()
            tracker.step()
