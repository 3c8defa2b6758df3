"""A history kept per epoch: at the end of each epoch its confusion matrix (a 10 x 10 tensor of
counts) and its accuracy are appended to ``history``, as skorch's ``History`` keeps a dict per
epoch. It grows with the epochs, by one small tensor each, not with the steps: a record the user
means to keep, not a leak (an epoch of thousands of steps in a real run makes it a few bytes a
step; here epochs of 6 steps).

Real case: skorch-dev/skorch#791, https://github.com/skorch-dev/skorch/issues/791 ("the histories
can easily weigh several hundred megabytes" from the batch-level entries; the epoch-level ones are
the light part worth keeping).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

EPOCH = 6


def run(tracker_factory, steps=30):
    g = seed(71)
    model = MLP(hidden=128, d_out=10)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    history = []
    with tracker_factory(model, optimizer=opt) as tracker:
        confusion = torch.zeros(10, 10, dtype=torch.long)
        for step in range(steps):
            x, y = batch(g, n=64, classes=10)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            confusion += torch.bincount(y * 10 + logits.argmax(1), minlength=100).view(10, 10)
            if step % EPOCH == EPOCH - 1:  # the epoch ends: its row of the history
                acc = confusion.diag().sum().item() / confusion.sum().item()
                history.append({"epoch": step // EPOCH, "confusion": confusion, "acc": acc})
                confusion = torch.zeros(10, 10, dtype=torch.long)
            tracker.step()
