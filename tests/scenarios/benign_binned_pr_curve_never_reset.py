"""The adaptive-threshold metric of ``leak_adaptive_threshold_pr_curve_compute`` in its binned form
(``thresholds=200``): its only state is a fixed ``(200, 2, 2)`` confusion-matrix tensor that each
``update`` adds into in place. The module still calls ``compute()`` every step and never
``reset()``, like the leaking loop, and a step's ``update`` allocates large temporaries (a
``(2048, 200)`` comparison), but the kept state does not grow: memory is flat.

Real case: Lightning-AI/torchmetrics https://github.com/Lightning-AI/torchmetrics/issues/2921
(the list states grow "if self.thresholds is None", while the binned branch keeps ``self.confmat``)
and anomalib https://github.com/openvinotoolkit/anomalib/issues/2531.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class BinnedPrecisionRecallCurve(nn.Module):
    def __init__(self, thresholds=200):
        super().__init__()
        self.register_buffer("thresholds", torch.linspace(0, 4, thresholds))
        self.register_buffer("confmat", torch.zeros(thresholds, 2, 2, dtype=torch.long))

    def update(self, preds, target):
        above = (preds.detach()[:, None] >= self.thresholds[None, :]).long()  # (N, T)
        t = target[:, None]
        self.confmat[:, 1, 1] += (above * t).sum(0)
        self.confmat[:, 0, 1] += (above * (1 - t)).sum(0)
        self.confmat[:, 1, 0] += ((1 - above) * t).sum(0)
        self.confmat[:, 0, 0] += ((1 - above) * (1 - t)).sum(0)

    def compute(self):
        tp, fp, fn = self.confmat[:, 1, 1], self.confmat[:, 0, 1], self.confmat[:, 1, 0]
        precision = tp / (tp + fp).clamp(min=1)
        recall = tp / (tp + fn).clamp(min=1)
        f1 = 2 * precision * recall / (precision + recall + 1e-10)
        return self.thresholds[f1.argmax()]


class AnomalyModule(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, d))
        self.image_threshold = BinnedPrecisionRecallCurve()

    def forward(self, x):
        return self.model(x)


def run(tracker_factory, steps=30):
    g = seed(157)
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
            module.image_threshold.compute()  # never reset: fine, the state is fixed-size
            tracker.step()
