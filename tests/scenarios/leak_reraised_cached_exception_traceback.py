"""An optional fused kernel that failed to build is remembered as one exception instance, and the
model re-raises that same instance on every call so that the caller falls back to the eager path.
Each ``raise`` of an existing exception appends the new frames to its ``__traceback__``: the
instance collects two traceback entries a step, the failing ``fused_layer_norm`` frame and the
``forward`` frame that caught it, and each frame keeps its locals, here that step's activations
(backward has run, so their graphs hold no saved tensors, but the activations stay). The exception
lives in a module global, so nothing is ever freed.

Real case: ipython/ipython https://github.com/ipython/ipython/pull/8017 ("exceptions keep track of
their traceback, resulting in memory growth in the controller because NoDB re-raises the same
instance over and over again"), patx/pickledb https://github.com/patx/pickledb/issues/70
(``raise self.key_string_error`` "append new tracebak to existing one ... It also introduces memory
leak") and python/cpython https://github.com/python/cpython/issues/90873 ("Raising exception
multiple times leaks memory").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_FUSED_ERROR", "top": 1}

# set once when the extension fails to import; re-raised on every call (the leak)
_FUSED_ERROR = RuntimeError("fused_layer_norm: extension not built (falling back to eager)")


def fused_layer_norm(x, weight, bias):
    if _FUSED_ERROR is not None:
        raise _FUSED_ERROR  # the same instance each time: its traceback keeps growing
    raise AssertionError("unreachable")


class NormMLP(nn.Module):
    def __init__(self, d=DIM, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        try:
            h = fused_layer_norm(h, self.norm.weight, self.norm.bias)
        except RuntimeError:
            h = self.norm(h)
        return self.fc2(h)


def run(tracker_factory, steps=30):
    g = seed(3103)
    _FUSED_ERROR.__traceback__ = None
    model = NormMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=128)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        _FUSED_ERROR.__traceback__ = None
