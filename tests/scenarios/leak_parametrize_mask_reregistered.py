"""Lottery-ticket style sparse training with ``torch.nn.utils.parametrize``: every few steps a
new magnitude mask is computed and applied with ``register_parametrization(layer, "weight",
Mask(mask))``, without ``remove_parametrizations`` first. Registering on an already parametrized
tensor *appends* to its ``ParametrizationList``, so ``layer.parametrizations.weight`` gains one
``Mask`` module (with its own weight-sized mask buffer) each round, and every forward applies
the whole chain.

Real case: "global_pruning costs memory after model is trained"
https://github.com/pytorch/pytorch/issues/49332 (pruning re-applied round after round without
``prune.remove``: each round stacks another mask on the module), here with the parametrization
API that replaced the pruning hooks (https://github.com/pytorch/pytorch/pull/33344, "Parametrization
Functionality").
"""
import torch
from torch import nn
from torch.nn.utils import parametrize

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "parametrizations", "top": 1}


class Mask(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, w):
        return w * self.mask


def run(tracker_factory, steps=30):
    g = seed(116)
    model = nn.Sequential(nn.Linear(DIM, 512), nn.ReLU(), nn.Linear(512, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    layer = model[0]
    sparsity = 0.2
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(64, DIM, generator=g)
            y = torch.randint(0, 4, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 2 == 0:
                with torch.no_grad():
                    w = layer.weight
                    k = int(w.numel() * sparsity)
                    thresh = w.abs().flatten().kthvalue(k).values
                    mask = (w.abs() > thresh).float()
                # the leak: the old parametrization is never removed before the new one is added
                parametrize.register_parametrization(layer, "weight", Mask(mask))
            tracker.step()
