"""An OOM-retry loop that keeps ``sys.exc_info()`` of every failed attempt for a summary: each
saved traceback keeps the failed attempt's frame, and with it that attempt's activations and graph.

Real case: https://github.com/pytorch/pytorch/issues/27600 ("Free Memory after CUDA out of memory
error": "the python error holds onto all the local variables of the stack trace. And so as long as
you hold onto the exception, the memory cannot be freed") and the editorial note of
https://github.com/pytorch/pytorch/issues/18853 ("Make sure that you are not holding on to tensors
via an exception object ... do error recovery outside of the catch block").
"""
import sys

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "failures", "top": 1}


class FakeOOM(RuntimeError):
    pass


def attempt(model, x, y, budget):
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    if logits.numel() > budget:
        raise FakeOOM("CUDA out of memory. Tried to allocate ...")
    return loss


def run(tracker_factory, steps=30):
    g = seed(44)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    failures = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            try:
                loss = attempt(model, x, y, budget=128)  # the full batch "runs out of memory"
            except FakeOOM:
                failures.append(sys.exc_info())  # the leak: the traceback keeps attempt()'s frame
                loss = attempt(model, x[:32], y[:32], budget=128)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
