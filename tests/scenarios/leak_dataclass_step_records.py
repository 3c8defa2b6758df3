"""A trainer that keeps one ``@dataclass`` record per step, with the loss and outputs as tensors.

Real case: https://github.com/pnnl/neuromancer/pull/292 ("Fixing leaking autograd graph memory in
Trainer": the trainer stored its metrics without detaching them, keeping hundreds of MB of autograd
graph per long run). Here a ``StepRecord`` dataclass holds the undetached loss and the logits, and
``Trainer.records`` keeps every record for an end-of-run report.
"""
from dataclasses import dataclass, field

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "records", "top": 1}


@dataclass
class StepRecord:
    step: int
    loss: torch.Tensor
    logits: torch.Tensor
    tags: dict = field(default_factory=dict)


class Trainer:
    def __init__(self, model, opt):
        self.model = model
        self.opt = opt
        self.records: list[StepRecord] = []

    def train_step(self, step, x, y):
        logits = self.model(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        # the leak: tensors (the logits with their graph) kept in a record for every step
        self.records.append(StepRecord(step=step, loss=loss, logits=logits, tags={"phase": "train"}))
        return loss


def run(tracker_factory, steps=30):
    g = seed(101)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = Trainer(model, opt)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=128)
            y = torch.randint(0, 64, (128,), generator=g)
            trainer.train_step(step, x, y)
            tracker.step()
