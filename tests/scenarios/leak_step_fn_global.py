"""A train-step function in a helper module appends "hard examples" to that module's global list.

Real case: chemprop https://github.com/chemprop/chemprop/issues/32 (a module-level cache filled
memory during inference) and the DeepEP ``_handle_cache`` question
https://github.com/pytorch/torchtitan/issues/2273 (a module-level dict only emptied on one path).
The loop's own frame holds nothing: the holder is a global of the module that defines train_step.
"""
import torch

from . import _steps
from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "HARD_EXAMPLES", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(13)
    _steps.HARD_EXAMPLES.clear()
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=64)
                _steps.train_step(model, opt, x, y)
                tracker.step()
    finally:
        _steps.HARD_EXAMPLES.clear()
