"""A segmentation module validates every fifth training step on four held-out batches under
``torch.no_grad()``. Its pixel-level AUROC metric (a metric with list states, like torchmetrics'
``BinaryAUROC(thresholds=None)``) is updated with every validation batch's per-pixel scores and
labels and, at the end of each validation, computed and logged. Nothing calls ``reset()`` after
``compute()``, so the metric's ``preds``/``target`` lists hold every pixel of every validation so
far. Training steps add nothing: memory is flat for four steps, then jumps by one validation's
worth of pixel scores, an intermittent staircase.

Real case: NRCan/geo-deep-learning https://github.com/NRCan/geo-deep-learning/issues/582
("Torchmetrics memory leaks causing OOMs": memory goes up when validating and won't go down; "the
fix is to use ``self.iou_classwise_metric.reset()`` at the end of validation and test step"), and
luxonis/luxonis-train https://github.com/luxonis/luxonis-train/pull/25 ("Fixed missing ``reset``
for our custom / reused metrics. This was causing a memory leak").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "val_pixel_auroc", "top": 1}
VAL_EVERY, VAL_BATCHES, HW = 5, 4, 32


class BinaryAUROC(nn.Module):
    """List-state AUROC: exact, so it keeps every score until reset()."""

    def __init__(self):
        super().__init__()
        self.preds, self.target = [], []

    def update(self, preds, target):
        self.preds.append(preds.flatten())
        self.target.append(target.flatten())

    def compute(self):
        p, t = torch.cat(self.preds), torch.cat(self.target)
        order = p.argsort(descending=True)
        t = t[order].float()
        tpr = t.cumsum(0) / t.sum().clamp(min=1)
        fpr = (1 - t).cumsum(0) / (1 - t).sum().clamp(min=1)
        return torch.trapz(tpr, fpr)

    def reset(self):
        self.preds, self.target = [], []


class SegModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 1))
        self.val_pixel_auroc = BinaryAUROC()
        self.logged = {}

    def forward(self, x):
        return self.net(x).squeeze(1)

    def training_step(self, x, y):
        return nn.functional.binary_cross_entropy_with_logits(self(x), y)

    @torch.no_grad()
    def validation_step(self, x, y):
        self.val_pixel_auroc.update(torch.sigmoid(self(x)), y.bool())

    def on_validation_epoch_end(self):
        self.logged["val/pixel_auroc"] = self.val_pixel_auroc.compute().item()
        # the fix: self.val_pixel_auroc.reset()


def run(tracker_factory, steps=30):
    g = seed(582)
    model = SegModule()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    val = [(torch.randn(8, 3, HW, HW, generator=g), (torch.rand(8, HW, HW, generator=g) > 0.7).float())
           for _ in range(VAL_BATCHES)]
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(8, 3, HW, HW, generator=g)
            y = (torch.rand(8, HW, HW, generator=g) > 0.7).float()
            loss = model.training_step(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % VAL_EVERY == VAL_EVERY - 1:
                model.eval()
                for vx, vy in val:
                    model.validation_step(vx, vy)
                model.on_validation_epoch_end()
                model.train()
            tracker.step()
