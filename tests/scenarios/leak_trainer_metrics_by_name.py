"""A trainer logs each step's loss and accuracy into a ``defaultdict(list)`` by name, as tensors.
Both lists grow by a tensor a step, but only the loss carries its autograd graph: that one keeps
nearly all the memory, and is the holder to name (the accuracy, computed from ``argmax``, has no
graph and adds 4 bytes a step).

Real case: https://github.com/victoresque/pytorch-template/issues/67 ("`met(output, target)`
should be changed to `met(output, target).item()`. If we don't, the memory space will increase
after each batch"; the template's tracker kept what each metric returned, by name) and
https://github.com/jokester-zzz/SSA-SC/issues/2 (losses logged by key: "it should be
loss[key].item()").
"""
import collections

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "metrics['loss']", "top": 1}


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        self.metrics = collections.defaultdict(list)

    def log(self, **values):
        for name, value in values.items():
            self.metrics[name].append(value)  # the leak: tensors, not value.item()

    def train_step(self, g):
        x, y = batch(g, n=64)
        out = self.model(x)
        loss = nn.functional.cross_entropy(out, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.log(loss=loss, acc=(out.argmax(1) == y).float().mean())


def run(tracker_factory, steps=30):
    g = seed(61)
    model = MLP(hidden=96)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01))
    with tracker_factory(model, optimizer=trainer.opt) as tracker:
        for _ in range(steps):
            trainer.train_step(g)
            tracker.step()
    return trainer
