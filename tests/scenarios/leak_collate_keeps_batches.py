"""A collate function written as a class (``collate_fn=Collater()``) that remembers the batches it
built so that the offending batch can be dumped when the loss goes NaN. It appends every collated
batch to ``self.history`` instead of keeping only the last one, and the DataLoader keeps the
collater alive for as long as the loader lives: every batch of the run stays in memory.

Real-world motivation: HuguesTHOMAS/KPConv-PyTorch
https://github.com/HuguesTHOMAS/KPConv-PyTorch/issues/124 (a collate class whose ``__call__`` keeps
the batch on ``self``: "graphics card memory usage will not be released").
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "history", "top": 1}


class Points(Dataset):
    def __init__(self, n, g):
        self.x = torch.randn(n, 32, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] * (1 + 0.1 * torch.rand(32)), self.y[i]  # a fresh augmented sample


class Collater:
    def __init__(self):
        self.history = []

    def __call__(self, samples):
        x = torch.stack([s[0] for s in samples])
        y = torch.stack([s[1] for s in samples])
        self.history.append((x, y))  # the leak: meant to keep the last batch only
        return x, y


def run(tracker_factory, steps=30):
    g = seed(542)
    loader = DataLoader(Points(4096, g), batch_size=64, shuffle=True, collate_fn=Collater(),
                        generator=torch.Generator().manual_seed(0))
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
            if not torch.isfinite(loss):
                torch.save(loader.collate_fn.history[-1], "bad_batch.pt")
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
            if step + 1 >= steps:
                break
