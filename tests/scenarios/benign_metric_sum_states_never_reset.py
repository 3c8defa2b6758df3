"""A torchmetrics-style ``MetricCollection`` (multiclass accuracy, precision and a ``MeanMetric`` of the
loss) updated every training step and never ``reset()``. It looks like the classic "metric never
reset" leak, but these metrics keep *sum* states, not list states: per-class true/false positive
counts and a running sum and weight, registered as buffers at construction and updated in place
(``+=``) on detached inputs. However long the run, the collection holds the same few small tensors.

Real case: torchmetrics https://github.com/Lightning-AI/torchmetrics/issues/3294 ("Memory Leak in
AveragePrecision": GPU memory grows with AveragePrecision, whose states are lists, while "this doesn't
happen with other metrics (Accuracy and Precision)"), and the memory-management docs added for
https://github.com/Lightning-AI/torchmetrics/issues/1949 in
https://github.com/Lightning-AI/torchmetrics/pull/2006.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Metric(nn.Module):
    def forward(self, *args):
        self.update(*args)


class MulticlassStatScores(Metric):
    def __init__(self, num_classes):
        super().__init__()
        self.register_buffer("tp", torch.zeros(num_classes, dtype=torch.long))
        self.register_buffer("fp", torch.zeros(num_classes, dtype=torch.long))
        self.register_buffer("support", torch.zeros(num_classes, dtype=torch.long))
        self.num_classes = num_classes

    @torch.no_grad()
    def update(self, logits, target):
        pred = logits.argmax(-1)
        hit = pred == target
        self.tp += torch.bincount(target[hit], minlength=self.num_classes)
        self.fp += torch.bincount(pred[~hit], minlength=self.num_classes)
        self.support += torch.bincount(target, minlength=self.num_classes)

    def compute(self):
        return {"acc": self.tp.sum() / self.support.sum().clamp(min=1),
                "precision": (self.tp / (self.tp + self.fp).clamp(min=1)).mean()}


class MeanMetric(Metric):
    def __init__(self):
        super().__init__()
        self.register_buffer("value", torch.zeros((), dtype=torch.float64))
        self.register_buffer("weight", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, value, weight=1.0):
        self.value += value.detach().double() * weight
        self.weight += weight

    def compute(self):
        return self.value / self.weight


def run(tracker_factory, steps=30):
    g = seed(967)
    model = MLP(d_in=64, hidden=128, d_out=10)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    metrics = nn.ModuleDict({"stats": MulticlassStatScores(10), "loss": MeanMetric()})
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128, d=64, classes=10)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            metrics["stats"](logits, y)
            metrics["loss"](loss, x.shape[0])
            if (step + 1) % 10 == 0:
                summary = {k: float(v) for k, v in metrics["stats"].compute().items()}
                summary["loss"] = float(metrics["loss"].compute())  # logged; no reset() anywhere
            tracker.step()
