"""A module that keeps its previous output in a registered buffer, replaced (not grown) each forward.

Real case: https://github.com/pfnet-research/pfhedge/issues/70 ("Use ``register_buffer`` in
``save_prev_output``": a hedging model feeds its previous output back as an input, stored as a
buffer). The buffer ``prev_output`` is reassigned with the detached new output every call: one
tensor of a fixed size, however long the run.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class FeedbackNet(nn.Module):
    def __init__(self, d=DIM, hidden=128, n=256):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d + hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.head = nn.Linear(hidden, 4)
        self.register_buffer("prev_output", torch.zeros(n, hidden))

    def forward(self, x):
        h = self.body(torch.cat([x, self.prev_output], dim=-1))
        self.prev_output = h.detach()  # a buffer replaced each call, not grown
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(207)
    model = FeedbackNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
