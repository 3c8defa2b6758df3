"""The fixed form of the re-raised-exception leak: the fused-kernel fallback raises a fresh
exception each call, and the model keeps only the latest one (``self.last_fallback_error``) for a
diagnostics endpoint. That one exception's traceback keeps one step's frames (and so that step's
activations and graph) until the next step replaces it: one step's worth, bounded, though a
profiler sees tensors kept alive by a traceback across steps.

Real case: the fix in ipython/ipython https://github.com/ipython/ipython/pull/8017 ("Fix is to
raise a new Exception() each time"), jupyterhub/jupyterhub
https://github.com/jupyterhub/jupyterhub/pull/1509 ("copy exception before reraising ... avoids
growing traceback on each raise") and aws/aws-iot-device-sdk-python
https://github.com/aws/aws-iot-device-sdk-python/pull/283 ("Exceptions must be instantiated at the
``raise`` time").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class FusedUnavailable(RuntimeError):
    pass


def fused_layer_norm(x, weight, bias):
    raise FusedUnavailable("fused_layer_norm: extension not built (falling back to eager)")


class NormMLP(nn.Module):
    def __init__(self, d=DIM, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, 4)
        self.last_fallback_error = None

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        try:
            h = fused_layer_norm(h, self.norm.weight, self.norm.bias)
        except FusedUnavailable as e:
            self.last_fallback_error = e  # replaced each step: one step's frames at most
            h = self.norm(h)
        return self.fc2(h)


def run(tracker_factory, steps=30):
    g = seed(3113)
    model = NormMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    model.last_fallback_error = None
