"""A gradient hook registered on a parameter inside ``forward()``, on every call, and never
removed: ``weight.register_hook`` adds one more closure to the parameter's own hook dict each
step, and each closure keeps the activation it was made with.

Real case: zennit https://github.com/chr5tphr/zennit/issues/11 ("Memory Leak": running the
attribution several times in a row kept GPU memory growing) fixed by
https://github.com/chr5tphr/zennit/pull/13 ("Be more careful with tensor references in Hook":
the tensors a tensor hook's closure referenced stayed alive as long as the hook did). The same
shape: a hook made per forward that captures the activation, attached to a tensor that lives
for the whole run (a parameter), so nothing ever drops the hooks.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "act", "top": 1}


class ScaledGradMLP(nn.Module):
    def __init__(self, d: int = DIM, hidden: int = 96, classes: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        act = h.detach()
        # the leak: a new hook on a long-lived parameter each call; its closure keeps `act`
        self.fc2.weight.register_hook(lambda g, act=act: g / (1.0 + act.abs().mean()))
        return self.head(torch.relu(self.fc2(h)))


def run(tracker_factory, steps=30):
    g = seed(61)
    model = ScaledGradMLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
