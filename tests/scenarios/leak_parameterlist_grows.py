"""An online classifier that grows an output unit when it sees a "new" class, but the check is wrong.

Real case: https://github.com/online-ml/deep-river/issues/169 (layer expansion in online learning:
new parameters are added to a running model as new classes/features arrive). Here the model keeps
its per-task prototype block in an ``nn.ParameterList`` and appends one whenever a task id is not in
``self.known``; the loop passes the batch index where the task id was meant, so every step is a
"new task" and a new Parameter (64 KiB) joins the list.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "prototypes", "top": 1}


class GrowingPrototypes(nn.Module):
    def __init__(self, d=DIM, hidden=256):
        super().__init__()
        self.encoder = nn.Linear(d, hidden)
        self.prototypes = nn.ParameterList()
        self.known = []

    def maybe_add_class(self, label):
        if label not in self.known:
            self.known.append(label)
            self.prototypes.append(nn.Parameter(torch.randn(64, self.encoder.out_features) * 0.01))

    def forward(self, x):
        z = torch.relu(self.encoder(x))
        protos = torch.stack(list(self.prototypes)).mean(1)  # (n_protos, hidden)
        return z @ protos.t()


def run(tracker_factory, steps=30):
    g = seed(104)
    model = GrowingPrototypes()
    opt = torch.optim.SGD(model.encoder.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            model.maybe_add_class(step)  # the bug: the batch index passed as the task id
            logits = model(x)
            loss = logits.logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
