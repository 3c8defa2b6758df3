"""A hand-written batch norm registers its running statistics as buffers and updates them in
``forward`` with grad on: each step's new buffer is built on the last one and on that step's batch
statistics, so the buffers carry a graph that gains every step's nodes, and the tensors saved for
the variance (never reached by ``backward``, since training uses the batch's own statistics) stay.

Real case: "Memory (CPU/sys) leak with custom batch norm layer"
https://github.com/pytorch/pytorch/issues/20275 ("that `running_mean` update is exactly your
problem. You keep extending the graph"; the fix: update under ``torch.no_grad()``), the same bug
fixed in facebookresearch/synsin https://github.com/facebookresearch/synsin/pull/20 ("not protected
from computing gradients, and thus are extending the computation graph on each call") and in d2l
https://github.com/d2l-ai/d2l-en/pull/1342. A registered buffer is the model's own state, which the
walk once left out: only the losses built on it were named.
"""
import torch
from torch import nn

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "norm.running_", "top": 1}


class BatchNorm(nn.Module):
    def __init__(self, d=DIM, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))

    def forward(self, x):
        if self.training:
            mean = x.mean(0)
            var = ((x - mean) ** 2).mean(0)
            # the leak: the fix is `with torch.no_grad():` around these two lines
            self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
            self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var * x.shape[0] / (x.shape[0] - 1)
        else:
            mean, var = self.running_mean, self.running_var
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


def run(tracker_factory, steps=30):
    g = seed(20)
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(DIM, DIM))
    model.add_module("norm", BatchNorm())
    model.add_module("net", MLP())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
