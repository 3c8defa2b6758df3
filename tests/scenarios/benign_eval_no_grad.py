"""Evaluation under ``torch.inference_mode()`` that keeps only per-batch accuracy numbers.

Real case: the recommended evaluation loop (https://theneuralbase.com/pytorch/learn/intermediate/evaluation-on-custom-classes/:
"forgotten torch.no_grad() causing silent OOM") done right.
"""
import torch

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(28)
    model = MLP(hidden=128)
    model.eval()
    accs = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            with torch.inference_mode():
                out = model(x)
            accs.append((out.argmax(-1) == y).float().mean().item())
            tracker.step()
