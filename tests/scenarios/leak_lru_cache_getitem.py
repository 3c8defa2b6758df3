"""A Dataset whose ``__getitem__`` is wrapped in ``functools.lru_cache(maxsize=None)``: every item
it ever returned stays cached, so memory grows for the whole first epoch (and the cache also keeps
the dataset itself alive).

Real case: MoonshotAI/Kimi-Audio https://github.com/MoonshotAI/Kimi-Audio/issues/117
("@lru_cache(maxsize=None) may cause memory leakage when training data grows larger"), on
``def __getitem__(self, i) -> Dict[str, torch.Tensor]`` in its fine-tuning dataset; the pattern
is why ruff has rule B019 (lru_cache on methods), enabled in PyTorch by
https://github.com/pytorch/pytorch/pull/127686.
"""
import functools

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "FeatureDataset.__getitem__", "top": 1}


class FeatureDataset(Dataset):
    def __init__(self, n, g):
        self.n = n
        self.g = g

    def __len__(self):
        return self.n

    @functools.lru_cache(maxsize=None)  # the leak: every item is kept
    def __getitem__(self, i):
        wave = torch.randn(DIM * 32, generator=self.g)
        return {"features": wave.view(32, DIM).mean(0), "frames": wave.clone(), "label": i % 4}


def run(tracker_factory, steps=30):
    g = seed(9)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loader = DataLoader(FeatureDataset(64 * 100, g), batch_size=64)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _, batch in zip(range(steps), loader):
            loss = nn.functional.cross_entropy(model(batch["features"]), batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
