"""SWAG (SWA-Gaussian) collected during training: every 2 steps the current weights, flattened
into one vector, update a running mean and mean of squares, and are appended to a deviation matrix
``pre_D`` used for the low-rank covariance. The matrix keeps at most ``K`` columns: past that the
oldest column is dropped. A weight-sized tensor is kept every other step, which looks like a
snapshot list that grows, but it stops at ``K`` (here after 10 steps) and then only turns over.

Real case: Lightning-AI/pytorch-lightning https://github.com/Lightning-AI/pytorch-lightning/issues/1894
(MultiSWAG implementation in the thread: "``self.pre_D`` ... contain[s] ... array of some recorded
positions"; "``self.K=20`` (max samples to record in ``self.pre_D``) and ``self.c=2`` (number steps
or epochs before recording another sample)").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
K = 5
C = 2


class Swag:
    def __init__(self):
        self.n_models = 0
        self.w_avg = None
        self.w2_avg = None
        self.pre_D = None

    @torch.no_grad()
    def aggregate(self, model):
        w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        if self.w_avg is None:
            self.w_avg, self.w2_avg = w.clone(), w * w
        else:
            n = self.n_models
            self.w_avg = (self.w_avg * n + w) / (n + 1)
            self.w2_avg = (self.w2_avg * n + w * w) / (n + 1)
        col = (w - self.w_avg)[:, None]
        self.pre_D = col if self.pre_D is None else torch.cat([self.pre_D, col], dim=1)
        if self.pre_D.shape[1] > K:
            self.pre_D = self.pre_D[:, 1:].clone()  # drop the oldest column
        self.n_models += 1


def run(tracker_factory, steps=30):
    g = seed(5721)
    model = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    swag = Swag()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % C == 0:
                swag.aggregate(model)
            tracker.step()
