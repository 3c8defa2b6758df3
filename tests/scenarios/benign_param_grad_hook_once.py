"""Per-parameter gradient clipping with ``register_hook`` done once, in ``__init__``: the
hooks live as long as the model and keep nothing that grows.

Real case: the per-parameter clipping idiom ``p.register_hook(lambda grad: torch.clamp(grad,
-clip, clip))`` recommended on the PyTorch forum, "Gradient clipping"
https://discuss.pytorch.org/t/gradient-clipping/2836 , the healthy twin of a hook registered in
``forward()`` on every call.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ClippedMLP(nn.Module):
    def __init__(self, d: int = DIM, hidden: int = 96, classes: int = 4, clip: float = 0.5):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)
        for p in self.parameters():  # registered once: one hook per parameter for the whole run
            p.register_hook(lambda grad: torch.clamp(grad, -clip, clip))

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.head(torch.relu(self.fc2(h)))


def run(tracker_factory, steps=30):
    g = seed(62)
    model = ClippedMLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
