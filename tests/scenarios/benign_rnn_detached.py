"""Truncated backpropagation through time done right: the hidden state is detached every batch.

Real case: the fix for https://discuss.pytorch.org/t/runtimeerror-trying-to-backward-through-the-graph-a-second-time-but-the-buffers-have-already-been-freed-specify-retain-graph-true-when-calling-backward-the-first-time/6795
(detach the carried state instead of retain_graph=True).
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(27)
    rnn = nn.GRU(DIM, 64, batch_first=True)
    head = nn.Linear(64, 1)
    model = nn.ModuleDict({"rnn": rnn, "head": head})
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    hidden = torch.zeros(1, 8, 64)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(8, 10, DIM, generator=g)
            y = torch.randn(8, 1, generator=g)
            out, hidden = rnn(x, hidden)
            hidden = hidden.detach()
            loss = nn.functional.mse_loss(head(out[:, -1]), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
