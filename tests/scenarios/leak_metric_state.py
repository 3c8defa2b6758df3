"""A metric with list states that is updated every step and never reset.

Real case: torchmetrics https://github.com/Lightning-AI/torchmetrics/issues/2481 ("Retrieval
Metrics GPU Memory Leak": list states ``preds``/``target`` grow until ``reset()``), and
https://github.com/Lightning-AI/torchmetrics/issues/1949. The metric here mimics a torchmetrics
``Metric`` (an nn.Module with list states added by ``add_state``).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed


class AveragePrecisionLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.preds = []
        self.target = []

    def update(self, preds, target):
        self.preds.append(preds.detach())
        self.target.append(target)

    def compute(self):
        p, t = torch.cat(self.preds), torch.cat(self.target)
        return (p.argmax(-1) == t).float().mean()

    def reset(self):
        self.preds, self.target = [], []


EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "metric.preds", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(5)
    model = MLP(d_out=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    metric = AveragePrecisionLike()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, classes=16)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            metric.update(logits.softmax(-1), y)  # the leak: never metric.reset()
            tracker.step()
