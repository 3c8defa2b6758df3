"""A helper with a mutable default argument (`seen=[]`) collects every batch's outputs.

The default list is created once, when the function is defined, and shared by every
call: it lives as long as the function and grows by one tensor a step. Real case: the
classic Python pitfall, "Mutable default arguments are usually a bug that can gobble
memory" (cohpy, https://notebook.community/james-prior/cohpy/20170327-cohpy-max-morlocke-memory-leaks).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "track_outputs.seen", "top": 1}


def track_outputs(logits, seen=[]):  # noqa: B006 - the leak under test
    seen.append(logits.detach())
    return len(seen)


def run(tracker_factory, steps=30):
    g = seed(23)
    track_outputs.__defaults__[0].clear()
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=64)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                track_outputs(logits)
                tracker.step()
    finally:
        track_outputs.__defaults__[0].clear()
