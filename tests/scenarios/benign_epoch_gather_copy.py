"""Each epoch (ten steps) gathers a shuffled copy of the whole training matrix,
``X_epoch = X_train[sampled_indices]``, and slices its batches from it. The copy is rebound at the
next epoch, so for a moment two copies are alive and then the old one is freed: memory steps up at
the first epoch and then stays at one extra copy (with a brief spike at each epoch boundary), not a
leak.

Real case: springfall2008/batpred https://github.com/springfall2008/batpred/pull/4564 ("train() drew
a full epoch of samples in one fancy-index gather ... always a second copy of the entire feature
matrix. And at the epoch boundary the previous epoch's array is still bound while the next is built,
so two full copies are live at the peak instant").
"""
import numpy as np
import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(548)
    rng = np.random.default_rng(1)
    X_train = rng.standard_normal((20000, 32)).astype(np.float32)
    y_train = rng.integers(0, 4, 20000)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps_per_epoch, bs = 10, 128
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            b = step % steps_per_epoch
            if b == 0:
                sampled_indices = rng.choice(len(X_train), size=len(X_train), replace=False)
                X_epoch, y_epoch = X_train[sampled_indices], y_train[sampled_indices]  # a full copy, replaced each epoch
            x = torch.from_numpy(X_epoch[b * bs:(b + 1) * bs])
            y = torch.from_numpy(y_epoch[b * bs:(b + 1) * bs])
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
