"""A hand-rolled EMA of the model's weights, updated after each optimizer step outside
`torch.no_grad()` and from the live parameters (not detached): every shadow tensor is computed
from its previous value and a parameter that requires grad, so each entry of the shadow dict
carries an autograd graph chained to every update before it.

Real case: ultralytics https://github.com/ultralytics/ultralytics/pull/25315 (review: an EMA
update that drops `.detach()` on the live parameters records the update in autograd, "making EMA
tensors part of an ever-growing graph"); gflownet
https://github.com/alexhernandezgarcia/gflownet/pull/133 (running averages computed with tensors
and no detach: "the whole pytorch computational graph is maintained in memory ... and grows very
fast with every iteration"). The fix updates the shadow under `torch.no_grad()` (or from
`p.detach()`).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "ema.shadow", "top": 1}


class EMA:
    def __init__(self, model, decay=0.99):
        self.decay = decay
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}

    def update(self, model):
        for n, p in model.named_parameters():  # the leak: no torch.no_grad(), p not detached
            self.shadow[n] = self.decay * self.shadow[n] + (1 - self.decay) * p


def run(tracker_factory, steps=30):
    g = seed(79)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ema = EMA(model)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update(model)
            tracker.step()
