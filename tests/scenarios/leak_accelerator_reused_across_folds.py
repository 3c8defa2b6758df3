"""K-fold cross-validation with one ``Accelerator`` made before the fold loop: each fold builds a
fresh model and Adam optimizer and passes them through ``accelerator.prepare``. ``prepare`` keeps
a reference to every model and optimizer it wrapped (``accelerator._models`` /
``accelerator._optimizers``, so that ``save_state``/``clip_grad_norm_`` can reach them), and nothing
drops them when the user's variables are rebound for the next fold: every finished fold's weights
and Adam moments stay alive until ``accelerator.free_memory()`` is called, which the script never
does. Growth comes in steps, one model plus its Adam state per fold (every 3 training steps).

Real case: huggingface/accelerate https://github.com/huggingface/accelerate/issues/84 ("I think
it's because ``Accelerator`` appends reference to optimizer ... When reusing ``Accelerator`` to
train multiple models, the GPU memory used by old optimizer is not released"), fixed by adding
``Accelerator.free_memory`` in https://github.com/huggingface/accelerate/pull/89.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "accelerator._", "top": 1}
FOLD_STEPS = 3


class AcceleratedOptimizer:
    """The wrapper ``prepare`` returns: forwards to the optimizer it wraps."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.optimizer.step()


class Accelerator:
    def __init__(self):
        self._models = []
        self._optimizers = []

    def prepare(self, model, optimizer):
        self._models.append(model)
        wrapped = AcceleratedOptimizer(optimizer)
        self._optimizers.append(wrapped)  # kept for save_state / clip_grad_norm_
        return model, wrapped

    def backward(self, loss):
        loss.backward()

    def free_memory(self):  # the fix, never called below
        self._models.clear()
        self._optimizers.clear()


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def run(tracker_factory, steps=30):
    g = seed(5101)
    accelerator = Accelerator()
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, opt = accelerator.prepare(model, opt)
    with tracker_factory(model, optimizer=opt.optimizer) as tracker:
        for step in range(steps):
            if step and step % FOLD_STEPS == 0:  # next fold: fresh model and optimizer
                model = make_model()
                opt = torch.optim.Adam(model.parameters(), lr=1e-3)
                model, opt = accelerator.prepare(model, opt)
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
            tracker.step()
