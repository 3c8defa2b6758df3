"""An early-stopping callback that validates every fifth step under ``torch.no_grad()`` and, when
the validation loss improves, keeps the validation logits of that best evaluation (for the
confusion matrix it reports at the end) and the step; otherwise it counts towards its patience.
The kept logits are replaced at each improvement: one validation set's logits, never more.

Real case: keras-team/keras https://github.com/keras-team/keras/issues/2611 ("Does early stopping
callback ensure the best model parameters are stored?": keep the state of the best evaluation, in
RAM, replaced whenever the monitored value improves).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience, self.bad = patience, 0
        self.best_loss = float("inf")
        self.best_outputs = None
        self.best_step = None

    def on_validation_end(self, step, val_loss, logits):
        if val_loss < self.best_loss:
            self.best_loss, self.best_step = val_loss, step
            self.best_outputs = logits  # replaces the previous best
            self.bad = 0
        else:
            self.bad += 1
        return self.bad >= self.patience


def run(tracker_factory, steps=30):
    g = seed(552)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xv, yv = batch(g, n=2048, classes=64)
    stopper = EarlyStopping()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, classes=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 5 == 4:
                with torch.no_grad():
                    logits = model(xv)
                    val = nn.functional.cross_entropy(logits, yv).item()
                if stopper.on_validation_end(step, val, logits):
                    pass  # a real trainer would stop; the run is too short to
            tracker.step()
