"""A loss-spike guard: a rolling window (``collections.deque(maxlen=window_size)``) of the last
losses, and of the gradient norms that ``clip_grad_norm_`` returns, compared with each new step's
value. The window fills during the first ``window_size`` steps and then stays at its size: the
deque drops its oldest entry at each append. Here the window keeps the detached 0-d tensors
themselves (no ``.item()``, so no device sync each step); it is 100 long, longer than a short run.

Real case: LLM Foundry's ``KillLossSpike`` callback,
https://github.com/mosaicml/llm-foundry/blob/main/llmfoundry/callbacks/kill_loss_spike_callback.py
(``self.loss_window = deque(maxlen=self.window_size)`` with ``window_size=100``; at each batch end
the loss is compared with the window's mean, ``outlier_multiplier`` times, then appended).
"""
from collections import deque

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class SpikeGuard:
    def __init__(self, window_size=100, outlier_multiplier=2.0, patience=4):
        self.window_size = window_size
        self.outlier_multiplier = outlier_multiplier
        self.patience = patience
        self.outliers = 0
        self.loss_window = deque(maxlen=window_size)
        self.grad_norm_window = deque(maxlen=window_size)

    def check(self, loss, grad_norm):
        if len(self.loss_window) >= 8:
            mean = torch.stack(tuple(self.loss_window)).mean()
            self.outliers = self.outliers + 1 if bool(loss >= mean * self.outlier_multiplier) else 0
        self.loss_window.append(loss)
        self.grad_norm_window.append(grad_norm)
        return self.outliers > self.patience


def run(tracker_factory, steps=30):
    g = seed(74)
    model = MLP(hidden=256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    guard = SpikeGuard()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if guard.check(loss.detach(), grad_norm):
                raise RuntimeError("loss spike")
            opt.step()
            tracker.step()
