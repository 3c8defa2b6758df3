"""Evaluation tracked with the model alone (no ``tracker.step()``, no optimizer: each call of the
model ends an iteration) that keeps only per-batch accuracy numbers.

Real case: the recommended evaluation loop (https://theneuralbase.com/pytorch/learn/intermediate/evaluation-on-custom-classes/:
"forgotten torch.no_grad() causing silent OOM") done right, in a script wrapped in
``memleak.track(model)`` as it stands.
"""
import torch

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(49)
    model = MLP(hidden=128).eval()
    accuracy = []
    with tracker_factory(model), torch.no_grad():
        for step in range(steps):
            x, y = batch(g, n=64)
            accuracy.append((model(x).argmax(-1) == y).float().mean().item())
