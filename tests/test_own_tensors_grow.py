"""A module whose own parameters or gradients grow in bytes while it registers nothing new: a
sparse gradient never zeroed (each step's rows added to it) and a parameter replaced by a larger
tensor each step are named at the gradient and at the parameter; a lazy module that takes its size
once, and a sparse gradient zeroed each step, are no leak."""
import torch
from torch import nn

import memleak


class Tower(nn.Module):
    def __init__(self, lazy=False):
        super().__init__()
        self.emb = nn.Embedding(4000, 32, sparse=True)
        self.head = nn.LazyLinear(1) if lazy else nn.Linear(32, 1)

    def forward(self, items):
        return self.head(self.emb(items).mean(1)).squeeze(-1)


def _sparse(zero_sparse, lazy=False, steps=30):
    torch.manual_seed(0)
    model = Tower(lazy)
    model(torch.zeros(1, 1, dtype=torch.long))  # a lazy head takes its size here
    sparse_opt = torch.optim.SparseAdam(list(model.emb.parameters()), lr=1e-3)
    dense_opt = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    with memleak.track(model, optimizer=dense_opt, level="full") as tracker:
        for _ in range(steps):
            loss = model(torch.randint(0, 4000, (256, 8))).pow(2).mean()
            dense_opt.zero_grad()
            if zero_sparse:
                sparse_opt.zero_grad()
            loss.backward()
            dense_opt.step()
            sparse_opt.step()
            tracker.step()
    return tracker.report()


def test_a_sparse_gradient_never_zeroed_is_named_at_the_gradient():
    report = _sparse(zero_sparse=False)
    top = report.suspects[0]
    assert report.verdict == "leak" and top.location == "emb.weight.grad", str(report)
    assert top.kind == memleak.Kind.CACHED_TENSOR and "zero_grad()" in top.fix, str(report)


def test_a_sparse_gradient_zeroed_each_step_is_no_leak():
    report = _sparse(zero_sparse=True, lazy=True)
    assert report.verdict != "leak", str(report)
    assert not any(s.leak for s in report.suspects), str(report)


def test_a_parameter_replaced_by_a_larger_one_each_step_is_named():
    torch.manual_seed(0)
    table = nn.Embedding(100, 64)
    model = nn.Sequential(table, nn.Linear(64, 1))
    with memleak.track(model, level="full") as tracker:
        for step in range(30):
            ids = torch.randint(0, table.weight.shape[0], (32,))
            model(ids).sum().backward()
            model.zero_grad(set_to_none=True)
            with torch.no_grad():  # new ids every step: the table gains rows (the leak)
                table.weight.data = torch.cat([table.weight.data, torch.randn(256, 64)])
            tracker.step()
    report = tracker.report()
    assert report.verdict == "leak" and report.suspects[0].location == "0.weight", str(report)
    assert "larger tensor" in report.suspects[0].fix, str(report)
