"""The fixed moving prototypes: the same freeze-then-unfreeze schedule (backbone frozen for two
epochs, unfrozen at step 24 of 60), with the prototype update under ``torch.no_grad()``. At the
unfreeze, memory steps up once and stays: the backbone's gradients and Adam's ``exp_avg`` /
``exp_avg_sq`` for its weights appear, and each step's forward now saves the backbone's activations
for backward (freed by it). A growth screen sees a rise that starts mid-run, but nothing builds up.

Real case: the detached update in EasonApolo/mstn https://github.com/EasonApolo/mstn/issues/4
(``self.s_centroid = s_centroid.detach()``), and the unfreeze schedule of ultralytics/yolov3
https://github.com/ultralytics/yolov3/issues/218.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
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

    @torch.no_grad()
    def update(self, feats, y):
        z = nn.functional.normalize(feats, dim=1)
        counts = torch.bincount(y, minlength=self.centroid.shape[0]).clamp(min=1).unsqueeze(1)
        current = torch.zeros_like(self.centroid).index_add(0, y, z) / counts
        self.centroid = (1 - self.decay) * self.centroid + self.decay * current


def run(tracker_factory, steps=60):
    g = seed(5706)
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
