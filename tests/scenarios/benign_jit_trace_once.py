"""The model is traced once, before the loop, and the traced module is reused for a validation
pass every few steps: TorchScript keeps that one trace for the process, a fixed cost that does not
grow (the pattern the fix of pytorch#35600's reports recommends).

Real case: https://github.com/pytorch/pytorch/issues/35600 (trace once and reuse instead of
tracing in the loop).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(95)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x0, _ = batch(g)
    with torch.no_grad():
        traced = torch.jit.trace(model, x0, check_trace=False)  # once
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 5 == 0:
                with torch.no_grad():
                    traced(x)
            tracker.step()
