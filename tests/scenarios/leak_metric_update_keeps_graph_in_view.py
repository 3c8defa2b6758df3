"""A metric updated with predictions that still carry their graph: its update runs under no_grad,
as torchmetrics' does, and stores a reshaped view of them, so each kept view keeps its base and
the base its step's autograd graph. The metric is never reset either.

Real case: https://github.com/Lightning-AI/pytorch-lightning/issues/4098 ("Memory leak when using
Metric with list state": a metric given ``y_hat`` with its graph kept it in its cached list state
for the whole run), https://github.com/pnnl/neuromancer/pull/292 ("Fixing leaking autograd graph
memory in Trainer": metrics stored without detaching their graphs) and
https://github.com/amjltc295/pytorch-golden-template/pull/64 (metrics updated without no_grad
leak GPU memory). torchmetrics' ``Metric.update`` runs under ``torch.no_grad()`` and keeps what
its ``_input_format`` makes of the predictions (a view here); a no_grad view of a tensor with a
graph has no grad_fn of its own, yet its ``_base`` keeps the graph alive.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed


class RocLike(nn.Module):
    """List states ``preds``/``target``, added to on every update, as torchmetrics' curve metrics."""

    def __init__(self, classes: int):
        super().__init__()
        self.classes = classes
        self.preds = []
        self.target = []

    def update(self, preds, target):
        with torch.no_grad():  # torchmetrics' update wrapper, and its multiclass curve format
            preds = preds.transpose(0, 1).reshape(self.classes, -1).T  # a view: no grad_fn, its base has one
            target = target.flatten().to(torch.int32)  # its own dtype: a new tensor made in update
            if preds.min() < 0 or preds.max() > 1:
                preds = preds.softmax(-1)
            self.preds.append(preds)
            self.target.append(target)

    def reset(self):
        self.preds, self.target = [], []


EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "roc.preds", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(11)
    model = MLP(d_out=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    roc = RocLike(8)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, classes=8)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            roc.update(logits.softmax(-1), y)  # the leak: probabilities with their graph, never reset
            tracker.step()
