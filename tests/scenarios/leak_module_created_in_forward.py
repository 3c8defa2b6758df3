"""A layer created inside forward() and stored on the model every call: each step registers a new
submodule in a ModuleDict, so its parameters, their gradients and the dict grow without end
(the parameters are no tensors a variable keeps: only the module tree holds them).

Real case: "Performance issues with nn.ModuleList() and growing architectures"
https://discuss.pytorch.org/t/performance-issues-with-nn-modulelist-and-growing-architectures/194782
(layers appended to an nn.ModuleList as training goes; the poster saw memory keep growing).
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "heads", "top": 1}


class PerStepHeads(nn.Module):
    def __init__(self, d: int = DIM, hidden: int = 64, classes: int = 4):
        super().__init__()
        self.fc = nn.Linear(d, hidden)
        self.heads = nn.ModuleDict()
        self.hidden, self.classes = hidden, classes

    def forward(self, x, step: int):
        h = torch.relu(self.fc(x))
        key = f"head_{step}"
        # the leak: a new head registered on every call instead of one made in __init__
        self.heads[key] = nn.Linear(self.hidden, self.classes).to(x.device)
        return self.heads[key](h)


def run(tracker_factory, steps=30):
    g = seed(11)
    model = PerStepHeads()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x, step), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
