"""Transfer learning with a frozen backbone for the first two epochs, then unfrozen. The model
keeps moving class prototypes (``prototypes.centroid``: the decayed mean of each class's normalized
features, as MSTN's moving semantic centroids) for a nearest-prototype evaluation, updated each step
as ``centroid = (1 - decay) * centroid + decay * current`` without ``torch.no_grad()`` or
``.detach()``. While the backbone is frozen its features need no grad, so the update builds no
graph and memory is flat. Once the backbone is unfrozen (step 24 of 60) every update chains onto
the last one, and each link keeps that step's feature normalization (its inputs and norms, saved
for a backward the centroids never get): memory grows every step from then on.

Real case: EasonApolo/mstn https://github.com/EasonApolo/mstn/issues/4 ("The necessity of 'detach'
is that the computing graph will continuously grow as we save last centroid and use it in the next
epoch"), with the late start of freeze-then-unfreeze schedules such as ultralytics/yolov3
https://github.com/ultralytics/yolov3/issues/218 ("Freeze backbone at epoch 0, unfreeze at epoch 1").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "centroid", "top": 1}
EPOCH = 12
UNFREEZE_EPOCH = 2
CLASSES = 4


class Net(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(DIM, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.head = nn.Linear(d, CLASSES)

    def forward(self, x):
        feats = self.backbone(x)
        return self.head(feats), feats


class MovingPrototypes:
    def __init__(self, classes, d, decay=0.3):
        self.decay = decay
        self.centroid = torch.zeros(classes, d)

    def update(self, feats, y):
        z = nn.functional.normalize(feats, dim=1)
        counts = torch.bincount(y, minlength=self.centroid.shape[0]).clamp(min=1).unsqueeze(1)
        current = torch.zeros_like(self.centroid).index_add(0, y, z) / counts
        # the leak: no torch.no_grad() / current.detach(); harmless while the backbone is frozen
        self.centroid = (1 - self.decay) * self.centroid + self.decay * current


def run(tracker_factory, steps=60):
    g = seed(5705)
    model = Net()
    model.backbone.requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    prototypes = MovingPrototypes(CLASSES, 256)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step == UNFREEZE_EPOCH * EPOCH:
                model.backbone.requires_grad_(True)
            x, y = batch(g, n=128)
            logits, feats = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prototypes.update(feats, y)
            tracker.step()
