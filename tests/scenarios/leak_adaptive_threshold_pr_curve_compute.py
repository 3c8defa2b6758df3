"""An anomaly-detection module (anomalib style) that keeps an adaptive threshold metric as a
submodule: a subclass of a binary precision-recall-curve metric with ``thresholds=None``, whose
states are the lists ``preds`` and ``target``. Every step the module updates it with the batch's
anomaly scores and calls ``compute()`` to pick the F1-optimal threshold; ``compute()`` concatenates
the lists but does not clear them and ``reset()`` is never called, so the lists grow by one batch of
scores (and labels) per step, for the whole run, inside the model.

Real case: Lightning-AI/torchmetrics https://github.com/Lightning-AI/torchmetrics/issues/2921
("continuously calling ``compute`` on ``BinaryPrecisionRecallCurve(Metric)`` grows the
``self.preds`` and ``self.target`` indefinitely. This eventually leads to a memory overflow"),
reported from anomalib https://github.com/openvinotoolkit/anomalib/issues/2531.
"""
import torch
from torch import nn

from ._common import seed

# a metric state (a list the metric's update() fills): the corpus files list states of metrics under
# surviving_tensors (leak_metric_state), also when the metric is a submodule of the model
EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "image_threshold", "top": 1}


class BinaryPrecisionRecallCurve(nn.Module):
    """The list-state (``thresholds=None``) branch of torchmetrics' metric."""

    def __init__(self):
        super().__init__()
        self.preds = []
        self.target = []

    def update(self, preds, target):
        self.preds.append(preds.detach())
        self.target.append(target)

    def compute(self):
        preds, target = torch.cat(self.preds), torch.cat(self.target)  # the lists are kept
        order = preds.argsort(descending=True)
        tp = target[order].cumsum(0).float()
        fp = (1 - target[order]).cumsum(0).float()
        precision = tp / (tp + fp)
        recall = tp / target.sum().clamp(min=1)
        return precision, recall, preds[order]

    def reset(self):
        self.preds, self.target = [], []


class AnomalyScoreThreshold(BinaryPrecisionRecallCurve):
    def __init__(self):
        super().__init__()
        self.value = torch.tensor(0.5)

    def compute(self):
        precision, recall, thresholds = super().compute()
        f1 = 2 * precision * recall / (precision + recall + 1e-10)
        self.value = thresholds[f1.argmax()].detach()
        return self.value


class AnomalyModule(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, d))
        self.image_threshold = AnomalyScoreThreshold()

    def forward(self, x):
        return self.model(x)


def run(tracker_factory, steps=30):
    g = seed(151)
    module = AnomalyModule()
    opt = torch.optim.Adam(module.model.parameters(), lr=1e-3)
    with tracker_factory(module, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(2048, 256, generator=g)
            labels = (torch.rand(2048, generator=g) < 0.1).long()
            x = x + labels[:, None].float() * 0.5
            recon = module(x)
            per_sample = (recon - x).pow(2).mean(-1)
            loss = per_sample[labels == 0].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            module.image_threshold.update(per_sample, labels)
            module.image_threshold.compute()  # the leak: compute() without reset()
            tracker.step()
