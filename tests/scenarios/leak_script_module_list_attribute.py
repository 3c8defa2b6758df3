"""A TorchScript-compiled feature module keeps a ``List[Tensor]`` attribute, ``self.history``,
and its scripted ``forward`` appends the detached pooled features of each call to it (for a
later drift check that never runs in training). The list lives in the ScriptModule's C++ object,
not in a Python list: each step adds a 256x128 float tensor (128 KiB) to it and nothing clears it.

Real case: "JIT Array Attribute is broken" https://github.com/pytorch/pytorch/issues/21040 (a
ScriptModule that accumulates into a ``List`` attribute on every forward, ``self.array.append``;
once forward is a script method the appends do land in the module's list).
"""
from typing import List

import torch
from torch import nn

from ._common import batch, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "encoder.history", "top": 1}


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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.jit.script(Encoder())
        self.head = nn.Linear(128, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def run(tracker_factory, steps=30):
    g = seed(314)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=256)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
