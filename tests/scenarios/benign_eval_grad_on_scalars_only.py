"""Evaluation with ``model.eval()`` but without ``torch.no_grad()``: every forward builds an
autograd graph it does not need, but the loop keeps only Python floats (``loss.item()``, the
accuracy as ``.item()``), so each batch's graph is freed when its variables are rebound next
iteration. Wasteful (a whole step's activations are held at a time), but flat: not a leak.

Real case: https://openillumi.com/en/en-pytorch-inference-mode-no-grad-eval ("model.eval() ...
does not disable gradient tracking"; ``torch.no_grad()`` is a memory optimisation for the forward
passes, the missing one costs memory per batch, it does not accumulate).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(546)
    model = MLP(hidden=256)
    model.eval()
    losses, accs = [], []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256)
            logits = model(x)  # graph built (no no_grad), then dropped
            loss = nn.functional.cross_entropy(logits, y)
            losses.append(loss.item())
            accs.append((logits.argmax(-1) == y).float().mean().item())
            tracker.step()
