"""A call-site logger for debugging: each step records who called it with ``inspect.stack()[1]``
and keeps the record. A FrameInfo holds its frame, and the frame keeps every local the training
step had when it returned: the batch, the logits and the loss, with the loss's autograd graph.

Real case: NVIDIA PyProf https://github.com/NVIDIA/PyProf/pull/57 ("The inspect library was
causing memory issues previously ... the GPU OOM issue we saw"), after the frames its NVTX markers
took from ``inspect.stack()``; Python's inspect documentation warns that keeping frame records
keeps their frames' locals. The fix keeps the file, line and function name, not the frame.
"""
import inspect

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "call_sites", "top": 1}


class CallSites:
    def __init__(self):
        self.call_sites = []

    def record(self):
        self.call_sites.append(inspect.stack(context=0)[1])  # the leak: the FrameInfo keeps the frame


def train_step(model, opt, x, y, sites):
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sites.record()
    return loss.item()


def run(tracker_factory, steps=30):
    g = seed(72)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sites = CallSites()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=128)
            train_step(model, opt, x, y, sites)
            tracker.step()
