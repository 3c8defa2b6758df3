"""A torchmetrics-style metric with list states: every step ``update`` appends the batch's detached
predictions and targets to the metric's lists, ``compute`` concatenates them at the end of each
epoch, and ``reset`` empties them. Memory climbs through every epoch and falls back at each reset:
bounded by an epoch, not a leak, over several epochs.

Real case: torchmetrics ``Metric`` (an ``nn.Module``) with ``add_state(..., default=[],
dist_reduce_fx="cat")`` list states and the ``update()``/``compute()``/``reset()`` cycle,
https://lightning.ai/docs/torchmetrics/stable/pages/overview.html (``valid_accuracy.update(...)``
per batch, ``compute()`` then ``reset()`` at the end of each epoch) and
https://lightning.ai/docs/torchmetrics/latest/references/metric.html (``compute_on_cpu``: "Only
works for list states"). Here an AUROC-like metric held on the model; an epoch is 10 steps.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
EPOCH = 10


class CatMetric(nn.Module):
    """The list-state part of torchmetrics.Metric: states appended per batch, reset per epoch."""

    def __init__(self):
        super().__init__()
        self._defaults = {"preds": [], "target": []}
        self.reset()

    def reset(self):
        for name, default in self._defaults.items():
            setattr(self, name, list(default))

    @torch.no_grad()
    def update(self, preds, target):
        self.preds.append(preds.detach().softmax(-1))
        self.target.append(target.detach())

    def compute(self):
        preds = torch.cat(self.preds)
        target = torch.cat(self.target)
        return (preds.argmax(-1) == target).float().mean()


def run(tracker_factory, steps=40, epoch=EPOCH):
    g = seed(62)
    model = MLP(hidden=128)
    model.train_metric = CatMetric()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.train_metric.update(logits, y)
            if step % epoch == epoch - 1:  # on_train_epoch_end
                history.append(model.train_metric.compute().item())
                model.train_metric.reset()
            tracker.step()
