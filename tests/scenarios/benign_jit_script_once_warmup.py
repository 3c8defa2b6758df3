"""A ``torch.jit.script``-ed model (scripted once, before the loop) used for inference over a
stream of batches. The profiling executor records shapes and re-optimises the graph during the
first calls, so memory rises over the first few iterations and then stays flat; nothing is kept
per step except floats in a bounded window.

Real case: "torch script module memory usage increases during inference."
https://github.com/pytorch/pytorch/issues/28055 and BigDL https://github.com/intel/BigDL/issues/1704
("Torch Script module from Python API, memory increases for the first 3 iterations").
"""
import collections

import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(DIM, 256)
        self.l2 = nn.Linear(256, 256)
        self.out = nn.Linear(256, 10)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        h = torch.relu(self.l2(h)) + h
        return torch.softmax(self.out(h), -1)


def run(tracker_factory, steps=30):
    g = seed(122)
    model = Scorer().eval()
    scripted = torch.jit.script(model)
    window = collections.deque(maxlen=8)
    with tracker_factory(model) as tracker:
        for _ in range(steps):
            with torch.no_grad():
                probs = scripted(torch.randn(256, DIM, generator=g))
            window.append(probs.max(-1).values.mean().item())
            tracker.step()
