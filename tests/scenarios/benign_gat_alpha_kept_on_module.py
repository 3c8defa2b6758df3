"""A graph attention layer keeps its last attention coefficients on the module
(``self.alpha = alpha``) so they can be read after the forward pass, as the PyG maintainer
suggested before ``return_attention_weights`` existed. ``alpha`` carries the step's autograd
graph, but the attribute is overwritten at every forward: at most one step's attention graph is
held at any time, so memory stays flat. It looks like a module attribute holding a graph each
step, which a naive check would flag.

Real case: pyg-team/pytorch_geometric https://github.com/pyg-team/pytorch_geometric/issues/577
("you can copy paste the GATConv and save the attention values in an attribute of the Module,
e.g., ``self.alpha = alpha``, and access them afterwards") and
https://github.com/pyg-team/pytorch_geometric/pull/1234 (storing the attention state on the layer).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class GATLayer(nn.Module):
    def __init__(self, d_in, d_out, heads=4):
        super().__init__()
        self.heads, self.d_out = heads, d_out
        self.lin = nn.Linear(d_in, heads * d_out, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, d_out) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, d_out) * 0.1)
        self.alpha = None

    def forward(self, x, edge_index):
        n = x.shape[0]
        h = self.lin(x).view(n, self.heads, self.d_out)
        src, dst = edge_index
        score = nn.functional.leaky_relu((h[src] * self.att_src).sum(-1) + (h[dst] * self.att_dst).sum(-1), 0.2)
        score = score - score.max()
        e = score.exp()
        denom = torch.zeros(n, self.heads).index_add_(0, dst, e)
        alpha = e / denom[dst]
        self.alpha = alpha  # overwritten each forward: one step's graph at most
        out = torch.zeros(n, self.heads, self.d_out).index_add_(0, dst, h[src] * alpha[..., None])
        return out.mean(1)


class GAT(nn.Module):
    def __init__(self, d=32, hidden=32, classes=5):
        super().__init__()
        self.gat1 = GATLayer(d, hidden)
        self.gat2 = GATLayer(hidden, classes)

    def forward(self, x, edge_index):
        return self.gat2(torch.relu(self.gat1(x, edge_index)), edge_index)


def run(tracker_factory, steps=30):
    g = seed(4104)
    model = GAT()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    entropy_log = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            n = 600
            src = torch.randint(0, n, (3000,), generator=g)
            dst = torch.randint(0, n, (3000,), generator=g)
            edge_index = torch.cat([torch.stack([src, dst]), torch.arange(n).repeat(2, 1)], 1)
            x = torch.randn(n, 32, generator=g)
            y = torch.randint(0, 5, (n,), generator=g)
            loss = nn.functional.cross_entropy(model(x, edge_index), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            a = model.gat1.alpha.detach()
            entropy_log.append(float(-(a * a.clamp_min(1e-9).log()).sum(0).mean()))  # floats: 30 of them
            tracker.step()
