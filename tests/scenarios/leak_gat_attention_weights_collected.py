"""A graph attention network trained on mini-batches of subgraphs; to plot how attention evolves,
the loop asks the GAT layer for its attention coefficients (``return_attention_weights=True``, the
``(edge_index, alpha)`` pair PyG's ``GATConv`` returns) and appends the pair to ``attention_log``
every step. ``alpha`` is the softmax output of the step's forward pass and still carries its
``grad_fn``. ``backward()`` frees the buffers that graph saved, so what piles up is each step's
``alpha`` (one coefficient per edge and head) and ``edge_index`` (about 110 KiB a step here),
plus the chain of graph nodes they keep.

Real case: pyg-team/pytorch_geometric https://github.com/pyg-team/pytorch_geometric/issues/577
("How can I extract the attention weight of GAT model?"), answered by
https://github.com/pyg-team/pytorch_geometric/pull/1234 (``GATConv`` returns ``(edge_index,
alpha)`` when asked) and https://github.com/pyg-team/pytorch_geometric/issues/1227 (the returned
weights print with ``grad_fn=<DivBackward0>``). The fix logs ``alpha.detach()`` (or only a
summary of it).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "attention_log", "top": 1}


class GATLayer(nn.Module):
    def __init__(self, d_in, d_out, heads=4):
        super().__init__()
        self.heads, self.d_out = heads, d_out
        self.lin = nn.Linear(d_in, heads * d_out, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, d_out) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, d_out) * 0.1)

    def forward(self, x, edge_index, return_attention_weights=False):
        n = x.shape[0]
        h = self.lin(x).view(n, self.heads, self.d_out)
        src, dst = edge_index
        score = nn.functional.leaky_relu((h[src] * self.att_src).sum(-1) + (h[dst] * self.att_dst).sum(-1), 0.2)
        score = score - score.max()
        e = score.exp()
        denom = torch.zeros(n, self.heads).index_add_(0, dst, e)
        alpha = e / denom[dst]
        out = torch.zeros(n, self.heads, self.d_out).index_add_(0, dst, h[src] * alpha[..., None])
        out = out.mean(1)
        return (out, (edge_index, alpha)) if return_attention_weights else out


class GAT(nn.Module):
    def __init__(self, d=32, hidden=32, classes=5):
        super().__init__()
        self.gat1 = GATLayer(d, hidden)
        self.gat2 = GATLayer(hidden, classes)

    def forward(self, x, edge_index):
        h, att = self.gat1(x, edge_index, return_attention_weights=True)
        return self.gat2(torch.relu(h), edge_index), att


def run(tracker_factory, steps=30):
    g = seed(4103)
    model = GAT()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    attention_log = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            n = 600
            src = torch.randint(0, n, (3000,), generator=g)
            dst = torch.randint(0, n, (3000,), generator=g)
            edge_index = torch.cat([torch.stack([src, dst]), torch.arange(n).repeat(2, 1)], 1)
            x = torch.randn(n, 32, generator=g)
            y = torch.randint(0, 5, (n,), generator=g)
            logits, (ei, alpha) = model(x, edge_index)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            attention_log.append((step, ei, alpha))  # the leak: alpha still has its grad_fn
            tracker.step()
