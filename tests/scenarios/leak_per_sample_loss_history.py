"""A data-debugging tool records, for every training sample, the loss of every step it was seen
in, so that a user can later pick any sample and plot its loss curve: ``loss_history[idx]`` is a
list that gains the sample's (detached) loss each epoch. The dataset is small (256 samples, eight
steps an epoch), so the dict has all its keys after the first epoch, but every list keeps growing
with the epochs: one 0-d tensor per sample per epoch, forever.

Real case: GrayboxTech/weightslab https://github.com/GrayboxTech/weightslab/issues/84 ("Loss overview
over samples": "Storing complete loss histories for all samples and timesteps creates memory bloat";
the implementation keeps per-step losses only for the sample selected for display).
"""
import collections

import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "loss_history", "top": 1}


class SampleLossTracker:
    def __init__(self):
        self.loss_history = collections.defaultdict(list)

    def update(self, indices, per_sample_loss):
        for i, l in zip(indices.tolist(), per_sample_loss.detach().unbind(0)):
            self.loss_history[i].append(l)  # the leak: every sample's whole history, as tensors


def run(tracker_factory, steps=30):
    g = seed(537)
    n, bs = 256, 32
    data_x = torch.randn(n, 32, generator=g)
    data_y = torch.randint(0, 4, (n,), generator=g)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = SampleLossTracker()
    with tracker_factory(model, optimizer=opt) as tracker:
        step = 0
        while step < steps:
            perm = torch.randperm(n, generator=g)
            for b in range(n // bs):
                idx = perm[b * bs:(b + 1) * bs]
                per_sample = nn.functional.cross_entropy(model(data_x[idx]), data_y[idx], reduction="none")
                opt.zero_grad()
                per_sample.mean().backward()
                opt.step()
                losses.update(idx, per_sample)
                tracker.step()
                step += 1
                if step >= steps:
                    break
