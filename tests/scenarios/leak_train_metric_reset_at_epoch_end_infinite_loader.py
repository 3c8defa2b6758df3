"""A LightningModule-style training loop over an infinite ``IterableDataset`` (random crops drawn
forever: no ``__len__``, never ``StopIteration``), stopped by ``max_steps``. The module keeps a
list-state AUROC (``train_auroc``, like torchmetrics' ``BinaryAUROC(thresholds=None)``) that
``training_step`` updates with every batch's scores and labels, and resets it in
``on_train_epoch_end``, as the torchmetrics docs recommend. With an infinite loader the epoch never
ends: the hook never runs, the reset never happens, and ``train_auroc.preds``/``target`` keep every
training batch. The validation metric, reset after each validation, is fine.

Real case: Lightning-AI/pytorch-lightning https://github.com/Lightning-AI/pytorch-lightning/issues/2150
("I have an infinite DataLoader that wraps an IterableDataset ... never raises StopIteration ...
trainer.fit(...) stays at Epoch 1 forever as the batch number keeps increasing"), with the metric
reset that only the epoch end performs, NRCan/geo-deep-learning
https://github.com/NRCan/geo-deep-learning/issues/582 (the fix "is to use
``self.iou_classwise_metric.reset()`` at the end of validation and test step").
"""
import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "train_auroc", "top": 1}
VAL_EVERY, D = 8, 48


class RandomCrops(IterableDataset):
    def __init__(self, g):
        self.g = g

    def __iter__(self):
        while True:  # forever: no epoch end
            x = torch.randn(D, generator=self.g)
            yield x, int(x[:4].sum() > 0)


class BinaryAUROC(nn.Module):
    def __init__(self):
        super().__init__()
        self.preds, self.target = [], []

    def update(self, preds, target):
        self.preds.append(preds.detach().flatten())
        self.target.append(target.flatten())

    def compute(self):
        p, t = torch.cat(self.preds), torch.cat(self.target).float()
        t = t[p.argsort(descending=True)]
        tpr = t.cumsum(0) / t.sum().clamp(min=1)
        fpr = (1 - t).cumsum(0) / (1 - t).sum().clamp(min=1)
        return torch.trapz(tpr, fpr)

    def reset(self):
        self.preds, self.target = [], []


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, 128), nn.ReLU(), nn.Linear(128, 1))
        self.train_auroc = BinaryAUROC()
        self.val_auroc = BinaryAUROC()
        self.logged = {}

    def training_step(self, x, y):
        logits = self.net(x).squeeze(1)
        self.train_auroc.update(torch.sigmoid(logits), y)
        return nn.functional.binary_cross_entropy_with_logits(logits, y.float())

    def on_train_epoch_end(self):  # never called: the loader never ends
        self.logged["train/auroc"] = self.train_auroc.compute().item()
        self.train_auroc.reset()

    @torch.no_grad()
    def validate(self, batches):
        for x, y in batches:
            self.val_auroc.update(torch.sigmoid(self.net(x).squeeze(1)), y)
        self.logged["val/auroc"] = self.val_auroc.compute().item()
        self.val_auroc.reset()


def run(tracker_factory, steps=30):
    g = seed(2150)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(RandomCrops(g), batch_size=1024)
    val = [(torch.randn(256, D, generator=g), torch.randint(0, 2, (256,), generator=g)) for _ in range(2)]
    with tracker_factory(model, optimizer=opt) as tracker:
        for step, (x, y) in enumerate(itertools.islice(loader, steps)):  # max_steps
            loss = model.training_step(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % VAL_EVERY == VAL_EVERY - 1:
                model.validate(val)
            tracker.step()
        # the epoch loop would call model.on_train_epoch_end() here, after StopIteration that never comes
