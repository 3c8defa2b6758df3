"""A hard-example pool of fixed size: every step the new candidates' scores (a parameter times the
batch values, so they require grad) are concatenated onto the pool and the pool is cut back to
its top-k by sorting and slicing. The pool's *size* is bounded, but it is never detached: each
step's pool is computed from the previous one, so the autograd graph behind it (cat, sort, index,
slice nodes, each saving the index tensors and inputs) grows every step.

Real case: "[Bug] not clearing memory after slicing tensor"
https://github.com/pytorch/pytorch/issues/10830 (``out = cat([out, pars * sample(data)]);
out = leaveTopK(out, k)`` runs out of memory although ``out`` stays at k elements; "When setting
requires_grad=False it does not run out of memory").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "pool", "top": 1}


def keep_top_k(x, k):
    _, idx = torch.sort(x, descending=True)
    return x[idx][:k]


def run(tracker_factory, steps=30):
    g = seed(115)
    model = MLP(hidden=128)
    temperature = nn.Parameter(torch.tensor([0.5]))
    opt = torch.optim.SGD(list(model.parameters()) + [temperature], lr=0.01)
    data = torch.rand(200_000, generator=g)
    pool = torch.tensor([])
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            logits = model(x) / temperature
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            idx = torch.randint(0, data.numel(), (20_000,), generator=g)
            pool = keep_top_k(torch.cat([pool, temperature * data[idx]]), 20_000)  # the leak: never detached
            tracker.step()
