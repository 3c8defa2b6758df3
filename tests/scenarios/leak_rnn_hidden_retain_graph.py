"""An RNN whose hidden state is carried across batches without ``detach()``, with ``retain_graph=True``
to silence "Trying to backward through the graph a second time".

Real case: the forum thread https://discuss.pytorch.org/t/runtimeerror-trying-to-backward-through-the-graph-a-second-time-but-the-buffers-have-already-been-freed-specify-retain-graph-true-when-calling-backward-the-first-time/6795
(a recurrent step that updates its hidden state), where retain_graph=True makes every step's graph
stay alive behind ``hidden``.
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
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    hidden = torch.zeros(1, 8, 64)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(8, 10, DIM, generator=g)
            y = torch.randn(8, 1, generator=g)
            out, hidden = rnn(x, hidden)  # the leak: hidden is never detached
            loss = nn.functional.mse_loss(head(out[:, -1]), y)
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            tracker.step()
