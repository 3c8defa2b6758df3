"""The bounded twin of ``leak_dynamic_id_embedding_grows``: IDs are hashed into 1024 buckets (the
hashing trick) and each bucket's row is created lazily the first time a bucket is hit. Early on
nearly every ID lands in a fresh bucket, so the row dict grows quickly, then ever more slowly as the
buckets fill: it can never hold more than 1024 rows, however many distinct IDs arrive.

Real case: the hashing-trick answer to the unbounded ``vtype='hash'`` table of alibaba/x-deeplearning
https://github.com/alibaba/x-deeplearning/issues/45 (a fixed number of hash buckets bounds the
table, whatever the ID space).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
BUCKETS = 1024


class LazyHashEmbedding:
    def __init__(self, dim=64, buckets=BUCKETS):
        self.dim, self.buckets = dim, buckets
        self.rows = {}  # bucket -> row tensor, at most `buckets` of them

    def lookup(self, ids):
        bs = [i % self.buckets for i in ids]
        for b in bs:
            if b not in self.rows:
                self.rows[b] = 0.01 * torch.randn(self.dim)
        e = torch.stack([self.rows[b] for b in bs]).requires_grad_()
        return bs, e

    def sgd(self, bs, grad, lr=0.1):
        for b, gr in zip(bs, grad):
            self.rows[b].sub_(lr * gr)


class Tower(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, e):
        return self.mlp(e).squeeze(-1)


def run(tracker_factory, steps=30):
    g = seed(541)
    emb = LazyHashEmbedding()
    model = Tower()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            ids = torch.randint(0, 10**9, (128,), generator=g).tolist()
            y = torch.rand(128, generator=g)
            bs, e = emb.lookup(ids)
            loss = nn.functional.binary_cross_entropy_with_logits(model(e), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            emb.sgd(bs, e.grad)
            tracker.step()
