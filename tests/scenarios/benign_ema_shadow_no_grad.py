"""The twin of leak_ema_shadow_without_no_grad: the same hand-rolled EMA of the weights, updated
under `torch.no_grad()` as the fix says. The shadow dict holds one fixed-size copy of each
parameter: memory stays flat.

Real case: ultralytics https://github.com/ultralytics/ultralytics/pull/25315 (the EMA update kept
detached, as the review asked).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class EMA:
    def __init__(self, model, decay=0.99):
        self.decay = decay
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}

    def update(self, model):
        with torch.no_grad():
            for n, p in model.named_parameters():
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
