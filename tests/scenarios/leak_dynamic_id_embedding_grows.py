"""A recommendation model whose ID embedding table grows when a new user ID appears (a "dynamic" or
hash-map embedding, rows appended with ``torch.cat``, updated by a hand-written sparse SGD step).
User IDs come from a huge space and every batch brings new ones, so the table gains rows every step
and never drops any: it grows with the number of distinct IDs ever seen, without bound.

Real case: alibaba/x-deeplearning https://github.com/alibaba/x-deeplearning/issues/45 ("memory leak
in deepctr example": with ``vtype='hash'`` embeddings, "the memory usage go up to 10GB after 1
minute").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "table", "top": 1}


class DynamicEmbedding:
    def __init__(self, dim=64):
        self.dim = dim
        self.row_of = {}
        self.table = torch.empty(0, dim)

    def lookup(self, ids):
        new = [i for i in dict.fromkeys(ids) if i not in self.row_of]
        if new:
            for i in new:
                self.row_of[i] = len(self.row_of)
            self.table = torch.cat([self.table, 0.01 * torch.randn(len(new), self.dim)])  # grows for each new id
        rows = torch.tensor([self.row_of[i] for i in ids])
        return rows, self.table[rows].requires_grad_()

    def sgd(self, rows, grad, lr=0.1):
        self.table.index_add_(0, rows, -lr * grad)


class Tower(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, e):
        return self.mlp(e).squeeze(-1)


def run(tracker_factory, steps=30):
    g = seed(540)
    emb = DynamicEmbedding()
    model = Tower()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            ids = torch.randint(0, 10**9, (128,), generator=g).tolist()
            y = torch.rand(128, generator=g)
            rows, e = emb.lookup(ids)
            loss = nn.functional.binary_cross_entropy_with_logits(model(e), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            emb.sgd(rows, e.grad)
            tracker.step()
