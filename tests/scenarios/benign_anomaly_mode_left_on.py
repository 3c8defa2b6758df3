"""A training run left in anomaly-detection mode (``with torch.autograd.detect_anomaly():``
around the whole loop, kept from a NaN hunt). Every autograd node made in the forward pass stores
the Python traceback of the line that created it, so each step allocates many host strings and
runs slower -- the flag is widely blamed for memory leaks -- but those tracebacks belong to the
step's graph, which ``loss.backward()`` frees; the loop logs ``loss.item()`` and keeps a detached
feature average. Memory is flat.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/26408 (the "memory leak"
under anomaly mode: strings stay only while the graph they annotate is alive; the repro kept its
graph by feeding outputs back in) and JasonMa2016/GoFAR https://github.com/JasonMa2016/GoFAR/pull/2
(the flag removed as the cause of a leak).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class DriftMonitor:
    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.feature_ema = None

    def __call__(self, module, inputs, output):
        m = output.detach().mean(0)
        if self.feature_ema is None:
            self.feature_ema = m
        else:
            self.feature_ema = self.momentum * self.feature_ema + (1 - self.momentum) * m


def run(tracker_factory, steps=30):
    g = seed(5804)
    model = MLP(hidden=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    monitor = DriftMonitor()
    handle = model.fc2.register_forward_hook(monitor)
    losses = []
    try:
        with torch.autograd.detect_anomaly(), tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=16)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                tracker.step()
    finally:
        handle.remove()
