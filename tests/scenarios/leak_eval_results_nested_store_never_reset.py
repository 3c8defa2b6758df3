"""A step-based trainer (``max_steps``, no epochs) with a periodic evaluator that keeps, for the
epoch-end metric hook, every evaluated batch's detached predictions and features in a dict of lists
several attributes deep: ``trainer.evaluator.results.store[name]``. The reset lives in
``on_epoch_end``, and a step-based run never ends an epoch, so the store is never cleared. The
evaluation runs every step on a small held-out batch, so each step adds a few lists' worth of
tensors to a generic container inside an object inside another object.

Real case: "Bounded memory leak caused by `trainer.evalutaion_loop.outputs`"
https://github.com/Lightning-AI/pytorch-lightning/issues/5735 (evaluation outputs cached on a
nested trainer attribute until the next validation epoch starts -- here it never starts), and
https://github.com/ashleve/lightning-hydra-template/issues/458 (epoch-end hooks make the trainer
accumulate every batch's result under the hood).
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "results.store", "top": 1}


class ResultCollection:
    def __init__(self):
        self.store = defaultdict(list)

    def log(self, name, value):
        self.store[name].append(value)

    def reset(self):
        self.store = defaultdict(list)


class Evaluator:
    def __init__(self):
        self.results = ResultCollection()

    def evaluate(self, model, x, y):
        with torch.no_grad():
            feats = model[:-1](x)
            logits = model[-1](feats)
        self.results.log("probs", logits.softmax(-1))
        self.results.log("feats", feats)
        self.results.log("correct", (logits.argmax(-1) == y))

    def on_epoch_end(self):  # never called in a max_steps run
        self.results.reset()


class Trainer:
    def __init__(self):
        self.evaluator = Evaluator()


def run(tracker_factory, steps=30):
    g = seed(405)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    trainer = Trainer()
    xv, yv = torch.randn(96, 64, generator=g), torch.randint(0, 10, (96,), generator=g)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            trainer.evaluator.evaluate(model, xv + 0.01 * step, yv)
            tracker.step()
