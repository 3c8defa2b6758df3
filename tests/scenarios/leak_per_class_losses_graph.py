"""A trainer that logs the loss of each class in a ``defaultdict(list)`` of tensors, for a
per-class report at the end: the entries are slices of the live loss, not detached, so each keeps
the step's autograd graph, and the dict is never cleared within the run.

Real case: neuromancer https://github.com/pnnl/neuromancer/pull/292 ("Fixing leaking autograd
graph memory in Trainer ... we're not detaching the grad graphs from the metrics before we store
them"), and the pytracking fix https://github.com/visionml/pytracking/pull/313 (stats ``val`` with
gradients accumulated by the trainer, "the gradient graph will be accumulated during training").
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "class_losses", "top": 1}


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        self.class_losses = defaultdict(list)  # class id -> its losses, for the final report

    def train_step(self, x, y):
        per_example = nn.functional.cross_entropy(self.model(x), y, reduction="none")
        weighted = per_example * (1.0 + 0.1 * y.float())  # harder classes weigh more
        for c in y.unique().tolist():
            self.class_losses[c].append(weighted[y == c].mean())  # the leak: no .detach()/.item()
        loss = weighted.mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


def run(tracker_factory, steps=30):
    g = seed(43)
    model = MLP(hidden=96, d_out=4)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01))
    with tracker_factory(model, optimizer=trainer.opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            trainer.train_step(x, y)
            tracker.step()
