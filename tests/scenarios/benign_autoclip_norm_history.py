"""AutoClip's QuantileClip (adaptive gradient clipping, arXiv:2007.14469): each step clips the
gradients to a quantile of the norms seen so far, and keeps the norms as one tensor,
``torch.hstack((history, new_norm))[-history_length:]``. With the default history of 1000 a
30-step run never fills it: every step leaves a new, one-element-longer tensor in the clipper's
state, like a tensor concatenated onto itself. It stops growing at 1000 norms (4 KB).

Real case: https://github.com/pseeth/autoclip, ``autoclip/torch/quantile.py``
(``QuantileClip._clip_global``, ``history_length: int = 1000``), used as
``QuantileClip.as_optimizer(optimizer, quantile=0.9)``.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class QuantileClip:
    def __init__(self, parameters, quantile=0.9, history_length=1000):
        self.parameters = list(parameters)
        self.quantile = quantile
        self.history_length = history_length
        self.state = {"global_history": torch.Tensor([])}

    def step(self):
        history = self.state["global_history"]
        threshold = torch.inf if len(history) == 0 else torch.quantile(history, self.quantile)
        new_grad_norm = nn.utils.clip_grad_norm_(self.parameters, max_norm=threshold)
        self.state["global_history"] = torch.hstack((history, new_grad_norm))[-self.history_length :]


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clipper = QuantileClip(model.parameters())
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            clipper.step()
            opt.step()
            tracker.step()
