"""A recommender with ``nn.Embedding(sparse=True)`` trained with ``SparseAdam`` on the item table
and Adam on the dense tower, but ``zero_grad()`` is only called on the dense optimizer. Dense
gradients would just be summed in place; a sparse COO gradient is accumulated by concatenating
indices and values (uncoalesced), so ``item_emb.weight.grad`` gains every step's rows and its nnz
grows without bound while SparseAdam keeps stepping on the ever longer gradient.

Real case: "Gradient update of a sparse matrix results in a memory leak"
https://github.com/pytorch/pytorch/issues/34964 (memory grows step after step when the weight is a
sparse tensor updated from sparse gradients; labelled module: sparse, topic: memory usage), and
https://github.com/pytorch/pytorch/pull/33393 (sparse gradients are accumulated by making a new
tensor, not in place).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "item_emb.weight.grad", "top": 1}


class Recommender(nn.Module):
    def __init__(self, n_items=5000, d=32):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, d, sparse=True)
        self.tower = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, items):
        return self.tower(self.item_emb(items).mean(1)).squeeze(-1)


def run(tracker_factory, steps=30):
    g = seed(107)
    model = Recommender()
    sparse_opt = torch.optim.SparseAdam(list(model.item_emb.parameters()), lr=1e-3)
    dense_opt = torch.optim.Adam(model.tower.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=dense_opt) as tracker:
        for _ in range(steps):
            items = torch.randint(0, 5000, (256, 8), generator=g)
            label = torch.rand(256, generator=g)
            loss = nn.functional.binary_cross_entropy_with_logits(model(items), label)
            dense_opt.zero_grad()  # the leak: sparse_opt.zero_grad() is never called
            loss.backward()
            dense_opt.step()
            sparse_opt.step()
            tracker.step()
