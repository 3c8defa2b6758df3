"""The twin of ``leak_collate_keeps_batches`` written as intended: the collate class keeps only the
last batch it built (``self.last = (x, y)``), to dump it if the loss goes NaN. One extra batch is
alive at a time, replaced by the next: memory is flat.

Real-world motivation: HuguesTHOMAS/KPConv-PyTorch
https://github.com/HuguesTHOMAS/KPConv-PyTorch/issues/124 (a collate class that keeps the batch on
``self``).
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Points(Dataset):
    def __init__(self, n, g):
        self.x = torch.randn(n, 32, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] * (1 + 0.1 * torch.rand(32)), self.y[i]


class Collater:
    def __init__(self):
        self.last = None

    def __call__(self, samples):
        x = torch.stack([s[0] for s in samples])
        y = torch.stack([s[1] for s in samples])
        self.last = (x, y)  # replaced by every batch
        return x, y


def run(tracker_factory, steps=30):
    g = seed(543)
    loader = DataLoader(Points(4096, g), batch_size=64, shuffle=True, collate_fn=Collater(),
                        generator=torch.Generator().manual_seed(0))
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
            if not torch.isfinite(loss):
                torch.save(loader.collate_fn.last, "bad_batch.pt")
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
            if step + 1 >= steps:
                break
