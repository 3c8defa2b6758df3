"""Short epochs (12 steps each) whose trainer gathers, per metric name, every step's detached
outputs (predictions, per-sample losses, embeddings) in a dict of lists on
``trainer.epoch_results``, computes epoch metrics from them at the end of the epoch and then resets
the dict. Within an epoch the number of live tensors climbs linearly; at each epoch boundary it
falls back to zero and climbs again, so the run is a sawtooth with a period of 12 steps and a flat
envelope.

Real case: "Memory (CPU and GPU) leaks during the 1st epoch"
https://github.com/Lightning-AI/pytorch-lightning/issues/1510 (the number of tensors tracked by the
garbage collector increased linearly during the first epoch, then fell to the initial value when
the 2nd epoch started and began increasing again), and
https://github.com/ashleve/lightning-hydra-template/issues/458 (overriding ``training_epoch_end``
makes Lightning accumulate every batch's result of the epoch).
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
EPOCH_LEN = 12


class Net(nn.Module):
    def __init__(self, d=64, hidden=128, classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = self.body(x)
        return self.head(h), h


class Trainer:
    def __init__(self):
        self.epoch_results = defaultdict(list)
        self.history = []

    def on_train_batch_end(self, logits, emb, per_sample):
        self.epoch_results["preds"].append(logits.detach().softmax(-1))
        self.epoch_results["emb"].append(emb.detach())
        self.epoch_results["loss"].append(per_sample.detach())

    def on_train_epoch_end(self):
        self.history.append(float(torch.cat(self.epoch_results["loss"]).mean()))
        self.epoch_results = defaultdict(list)


def run(tracker_factory, steps=30):
    g = seed(303)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    trainer = Trainer()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(128, 64, generator=g), torch.randint(0, 10, (128,), generator=g)
            logits, emb = model(x)
            per_sample = nn.functional.cross_entropy(logits, y, reduction="none")
            loss = per_sample.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            trainer.on_train_batch_end(logits, emb, per_sample)
            if (step + 1) % EPOCH_LEN == 0:
                trainer.on_train_epoch_end()
            tracker.step()
