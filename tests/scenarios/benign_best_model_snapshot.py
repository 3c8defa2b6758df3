"""The best weights so far kept in memory with ``copy.deepcopy(model.state_dict())`` and replaced
whenever validation improves: one extra copy of the model, not a growing one.

Real case: the "best model weights" idiom of PyTorch's transfer-learning tutorial
(``best_model_wts = copy.deepcopy(model.state_dict())`` when ``epoch_acc > best_acc``), whose
deep copy was added in https://github.com/pytorch/tutorials/pull/188 ("Fixed deep copying
model.state_dict() ... Otherwise best_model_wts changes always to last epoch's state"). The copy is taken every few steps while
validation improves; each new copy replaces the old one, so memory steps up once and stays.
"""
import copy

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(44)
    model = MLP(hidden=192, d_out=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xv, yv = batch(g, n=256, classes=8)
    best_acc, best_model_wts = -1.0, None
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, classes=8)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 3 == 2:  # a short "epoch": validate and keep the best weights
                with torch.no_grad():
                    acc = (model(xv).argmax(-1) == yv).float().mean().item()
                if acc >= best_acc:
                    best_acc, best_model_wts = acc, copy.deepcopy(model.state_dict())
            tracker.step()
    model.load_state_dict(best_model_wts)
