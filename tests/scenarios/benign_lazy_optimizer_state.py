"""Adam creates its state (exp_avg, exp_avg_sq) on the first ``step()``: a step up, then flat.

Real case: the memory breakdown of training (parameters, gradients, optimizer state, activations)
in https://25621.github.io/ai-learning-guides/guides/pytorch-deep-dive/projects/memory-breakdown/ and
the caching-allocator explanation https://discuss.pytorch.org/t/what-exactly-is-occupying-the-gpu-cache/80645/2.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(20)
    model = MLP(hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
