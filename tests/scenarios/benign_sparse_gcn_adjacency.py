"""A two-layer graph convolutional network on a fixed sparse adjacency: the normalised adjacency
is built once as a coalesced ``torch.sparse_coo_tensor`` before training, and every step runs
``torch.sparse.mm(adj, h)`` forward and backward. Nothing sparse is created or kept per step apart
from the step's own temporaries: memory is flat.

Real case: "coalesce for sparse tensors causes a memory leak"
https://github.com/pytorch/pytorch/issues/1449 and "Suspected memory leak in torch.addmm with
sparse matrices" https://github.com/pytorch/pytorch/issues/1473 (both fixed long ago); a benign
check that a sparse-matmul training loop is not mistaken for a leak.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def normalized_adjacency(n, deg, g):
    src = torch.arange(n).repeat_interleave(deg)
    dst = torch.randint(0, n, (n * deg,), generator=g)
    idx = torch.cat([torch.stack([src, dst]), torch.stack([dst, src]), torch.arange(n).repeat(2, 1)], 1)
    val = torch.ones(idx.shape[1])
    adj = torch.sparse_coo_tensor(idx, val, (n, n)).coalesce()
    d = torch.sparse.sum(adj, 1).to_dense().pow(-0.5)
    i = adj.indices()
    return torch.sparse_coo_tensor(i, adj.values() * d[i[0]] * d[i[1]], (n, n)).coalesce()


class GCN(nn.Module):
    def __init__(self, d_in, hidden, classes):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, classes)

    def forward(self, adj, x):
        h = torch.relu(torch.sparse.mm(adj, self.l1(x)))
        return torch.sparse.mm(adj, self.l2(h))


def run(tracker_factory, steps=30):
    g = seed(108)
    n = 2000
    adj = normalized_adjacency(n, 5, g)
    x = torch.randn(n, 32, generator=g)
    y = torch.randint(0, 6, (n,), generator=g)
    model = GCN(32, 64, 6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(adj, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
