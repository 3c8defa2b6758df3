"""An RNN whose hidden state is carried from batch to batch without ``detach()`` in a streaming
predictor that runs outside ``torch.no_grad()``: every step's graph hangs off ``hidden``.

Real case: the forum thread https://discuss.pytorch.org/t/runtimeerror-trying-to-backward-through-the-graph-a-second-time-but-the-buffers-have-already-been-freed-specify-retain-graph-true-when-calling-backward-the-first-time/6795
(a recurrent step that updates its hidden state: the graph through the carried state grows, and
retain_graph=True, the usual "fix" for the error, keeps it all alive). Here the predictor never
calls backward, which keeps the graph alive the same way without the in-place error.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "hidden", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(6)
    rnn = nn.GRU(DIM, 64, batch_first=True)
    head = nn.Linear(64, 1)
    model = nn.ModuleDict({"rnn": rnn, "head": head})
    hidden = torch.zeros(1, 8, 64)
    forecasts = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x = torch.randn(8, 10, DIM, generator=g)
            out, hidden = rnn(x, hidden)  # the leak: hidden is never detached (and no torch.no_grad())
            forecasts.append(head(out[:, -1]).mean().item())
            tracker.step()
