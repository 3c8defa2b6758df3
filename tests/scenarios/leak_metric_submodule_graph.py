"""A differentiable Dice metric kept as a submodule of the model: its ``update`` appends the
batch's probabilities to list states without ``detach()``, and ``reset()`` only comes at the end
of an epoch that the run never reaches, so every step's graph from the logits to the Dice
inputs stays alive with the metric.

Real case: pytorch-lightning https://github.com/Lightning-AI/pytorch-lightning/issues/4098
("Memory leak when using Metric with list state": a differentiable Dice metric created in the
model's ``__init__`` and called in ``training_step``; the states kept the computational graph),
fixed by https://github.com/Lightning-AI/pytorch-lightning/pull/4313 ("Make sure that the metrics
states gets detached from the computational graph to prevent memory consumption from growing").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "dice.probs", "top": 1}


class DiceLike(nn.Module):
    """A Metric-like module with list states (``add_state(..., default=[])``)."""

    def __init__(self, classes):
        super().__init__()
        self.classes = classes
        self.probs = []
        self.target = []

    def update(self, logits, target):
        self.probs.append(logits.softmax(-1))  # the leak: no .detach(), the graph stays
        self.target.append(target)

    def forward(self, logits, target):
        self.update(logits, target)
        onehot = nn.functional.one_hot(target, self.classes).float()
        p = self.probs[-1]
        return 2 * (p * onehot).sum() / (p.sum() + onehot.sum())

    def reset(self):
        self.probs, self.target = [], []


class Segmenter(MLP):
    def __init__(self, classes=16):
        super().__init__(hidden=96, d_out=classes)
        self.dice = DiceLike(classes)


def run(tracker_factory, steps=30, epoch_len=1000):
    g = seed(41)
    model = Segmenter()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dice_log = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, classes=16)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dice_log.append(float(model.dice(logits, y)))  # logged as a float: not the leak
            if (step + 1) % epoch_len == 0:
                model.dice.reset()
            tracker.step()
