"""Twin of ``leak_script_module_list_attribute``: the TorchScript feature module keeps its
``List[Tensor]`` attribute ``history`` of per-call features, but a scripted ``drift()`` method is
called after each step to reduce the list to a float and clear it, so the list holds at most one
step's tensors.

Real case: "JIT Array Attribute is broken" https://github.com/pytorch/pytorch/issues/21040 (a
ScriptModule accumulating into a ``List`` attribute across forward calls); here it is drained
every step.
"""
from typing import List

import torch
from torch import nn

from ._common import batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Encoder(nn.Module):
    history: List[torch.Tensor]

    def __init__(self, d_in=32, hidden=128):
        super().__init__()
        self.fc = nn.Linear(d_in, hidden)
        self.history = []

    def forward(self, x):
        h = torch.relu(self.fc(x))
        self.history.append(h.detach())
        return h

    @torch.jit.export
    def drift(self) -> float:
        total = 0.0
        for t in self.history:
            total += float(t.mean())
        self.history.clear()
        return total


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.jit.script(Encoder())
        self.head = nn.Linear(128, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def run(tracker_factory, steps=30):
    g = seed(315)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    drifts = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=256)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            drifts.append(model.encoder.drift())
            tracker.step()
