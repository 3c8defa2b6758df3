"""A rolling average of the loss over its last 100 values, kept as detached tensors in a deque with
no ``maxlen``: the code trims it by hand (``if len(window) > window_size: window.popleft()``). A
30-step run never fills it, so every step adds one small tensor, a staircase like a leak's; the
bound is in the code, not in the deque.

Real-world motivation: txt2vid's ``RollingAvgLoss``
https://github.com/miguelmartin75/txt2vid/blob/master/txt2vid/util/metrics.py, a
``collections.deque()`` trimmed with ``popleft()`` once longer than ``self.window_size`` (100),
fed each step's loss.
"""
import collections

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class RollingAvgLoss:
    def __init__(self, window_size=100):
        self.window_size = window_size
        self.loss_window = collections.deque()

    def update(self, loss):
        self.loss_window.append(loss)
        if len(self.loss_window) > self.window_size:
            self.loss_window.popleft()

    def get(self):
        return torch.stack(list(self.loss_window)).mean()


def run(tracker_factory, steps=30):
    g = seed(81)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    smoother = RollingAvgLoss()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            smoother.update(loss.detach())
            smoothed = smoother.get()  # printed
            del smoothed
            tracker.step()
