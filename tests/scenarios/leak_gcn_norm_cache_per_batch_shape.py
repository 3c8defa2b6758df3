"""A graph-classification GCN whose convolution caches the symmetric normalisation of each batch
(the edge index with self loops and the ``deg^-1/2 A deg^-1/2`` edge weights, what PyG's
``GCNConv(cached=True)`` keeps), keyed by the batch's shape ``(num_nodes, num_edges)``: the author
saw ``cached=True`` refuse a second mini-batch ("Cached N number of edges, but found M") and keyed
the cache by batch shape instead of turning it off. Mini-batches of variable-size molecules are
concatenated into one disjoint graph, and under a shuffled loader the pair (sum of nodes, sum of
edges) almost never repeats, so every step adds one entry per layer and nothing is ever hit or
evicted.

Real case: pyg-team/pytorch_geometric https://github.com/pyg-team/pytorch_geometric/issues/619
(``cached=True`` with mini-batches: "RuntimeError: Cached 21000 number of edges, but found 420";
the maintainer: remove ``cached=True``) and https://github.com/pyg-team/pytorch_geometric/pull/10689
("``Batch.from_data_list()`` concatenates variable-size graphs: the shape key is ``(sum_nodes,
sum_edges)`` ... batch compositions never repeat and every batch triggers a new [entry] cached
indefinitely", ~31,000 unique batch shapes in a 100-epoch ZINC run).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "_norm_cache", "top": 1}


def random_molecule(g, d=16):
    n = int(torch.randint(8, 40, (1,), generator=g))
    m = n + int(torch.randint(0, n, (1,), generator=g))
    src = torch.randint(0, n, (m,), generator=g)
    dst = torch.randint(0, n, (m,), generator=g)
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
    return torch.randn(n, d, generator=g), edge_index, int(torch.randint(0, 3, (1,), generator=g))


def collate(graphs):
    xs, edges, batch, ys, offset = [], [], [], [], 0
    for i, (x, e, y) in enumerate(graphs):
        xs.append(x)
        edges.append(e + offset)
        batch.append(torch.full((x.shape[0],), i))
        ys.append(y)
        offset += x.shape[0]
    return torch.cat(xs), torch.cat(edges, 1), torch.cat(batch), torch.tensor(ys)


class CachedGCNConv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)
        self._norm_cache = {}

    def normalize(self, edge_index, n):
        key = (n, edge_index.shape[1])
        if key not in self._norm_cache:  # the leak: one entry per batch shape, never evicted
            loops = torch.arange(n).repeat(2, 1)
            ei = torch.cat([edge_index, loops], 1)
            deg = torch.zeros(n).index_add_(0, ei[1], torch.ones(ei.shape[1]))
            dinv = deg.pow(-0.5)
            self._norm_cache[key] = (ei, dinv[ei[0]] * dinv[ei[1]])
        return self._norm_cache[key]

    def forward(self, x, edge_index):
        ei, w = self.normalize(edge_index, x.shape[0])
        h = self.lin(x)
        return torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]] * w[:, None])


class GCN(nn.Module):
    def __init__(self, d=16, hidden=64, classes=3):
        super().__init__()
        self.conv1 = CachedGCNConv(d, hidden)
        self.conv2 = CachedGCNConv(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index, batch, num_graphs):
        h = torch.relu(self.conv1(x, edge_index))
        h = torch.relu(self.conv2(h, edge_index))
        pooled = torch.zeros(num_graphs, h.shape[1]).index_add_(0, batch, h)
        return self.head(pooled)


def run(tracker_factory, steps=30):
    g = seed(4101)
    dataset = [random_molecule(g) for _ in range(512)]
    model = GCN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            idx = torch.randperm(len(dataset), generator=g)[:64].tolist()
            x, edge_index, batch, y = collate([dataset[i] for i in idx])
            loss = nn.functional.cross_entropy(model(x, edge_index, batch, 64), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
