"""A transductive GCN trained on a fixed set of eight graph snapshots (one large graph per
region), cycling through them, one snapshot a step. Each convolution caches the symmetric
normalisation of a snapshot (edge index with self loops and ``deg^-1/2 A deg^-1/2`` weights,
what PyG's ``GCNConv(cached=True)`` keeps), keyed by the snapshot's id: the cache fills during the
first eight steps and is then only read. It looks like a per-batch cache that grows, but its keys
come from a fixed set.

Real case: the intended use of ``cached=True`` ("cached only for transductive learning",
https://github.com/pyg-team/pytorch_geometric/issues/7173; "the self.cached prevented the model
from recomputing the normalized graph over and over and just memorizing it since the graph is the
same", https://github.com/VITA-Group/Deep_GCN_Benchmarking/issues/2), with one entry per fixed graph.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def snapshot(g, n, d=16):
    m = 4 * n
    src = torch.randint(0, n, (m,), generator=g)
    dst = torch.randint(0, n, (m,), generator=g)
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
    return torch.randn(n, d, generator=g), edge_index, torch.randint(0, 4, (n,), generator=g)


class CachedGCNConv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)
        self._norm_cache = {}

    def normalize(self, key, edge_index, n):
        if key not in self._norm_cache:  # one entry per snapshot of a fixed set
            loops = torch.arange(n).repeat(2, 1)
            ei = torch.cat([edge_index, loops], 1)
            deg = torch.zeros(n).index_add_(0, ei[1], torch.ones(ei.shape[1]))
            dinv = deg.pow(-0.5)
            self._norm_cache[key] = (ei, dinv[ei[0]] * dinv[ei[1]])
        return self._norm_cache[key]

    def forward(self, x, edge_index, key):
        ei, w = self.normalize(key, edge_index, x.shape[0])
        h = self.lin(x)
        return torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]] * w[:, None])


class GCN(nn.Module):
    def __init__(self, d=16, hidden=64, classes=4):
        super().__init__()
        self.conv1 = CachedGCNConv(d, hidden)
        self.conv2 = CachedGCNConv(hidden, classes)

    def forward(self, x, edge_index, key):
        return self.conv2(torch.relu(self.conv1(x, edge_index, key)), edge_index, key)


def run(tracker_factory, steps=30):
    g = seed(4102)
    graphs = [snapshot(g, int(n)) for n in torch.randint(800, 1600, (8,), generator=g)]
    model = GCN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            key = step % len(graphs)
            x, edge_index, y = graphs[key]
            loss = nn.functional.cross_entropy(model(x, edge_index, key), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
