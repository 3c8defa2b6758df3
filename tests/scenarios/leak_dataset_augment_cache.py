"""A Dataset whose ``__getitem__`` memoizes its augmented samples in a dict keyed by the index
and the random crop it drew: the key never repeats, so the cache is never hit and grows by one
augmented tensor per sample (``num_workers=0``: the dataset lives in the training process).

Real case: "Caching Support for class Dataset" https://github.com/pytorch/pytorch/issues/35642
(the ``self.cache[index] = sample`` memo in ``__getitem__``) and torchvision's answer in "Load
the entire dataset into memory" https://github.com/pytorch/vision/issues/8059 (caching after
the random transforms both grows the cache and freezes the augmentation). Here the key carries
the random crop, so every epoch adds new entries.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "cache", "top": 1}


class CroppedSignals(Dataset):
    def __init__(self, n: int = 4096, length: int = DIM + 16):
        # a Dataset's tensors are host tensors, also when the loop trains on a GPU
        g = torch.Generator("cpu").manual_seed(66)
        self.signals = torch.randn(n, length, generator=g, device="cpu")
        self.labels = torch.randint(0, 4, (n,), generator=g, device="cpu")
        self.rng = torch.Generator("cpu").manual_seed(67)
        self.cache = {}

    def __len__(self):
        return len(self.signals)

    def __getitem__(self, i):
        off = int(torch.randint(0, 16, (1,), generator=self.rng, device="cpu"))
        key = (i, off)
        if key not in self.cache:  # the leak: a random key is (almost) never seen again
            self.cache[key] = (self.signals[i, off:off + DIM] * 1.5).clone()
        return self.cache[key], self.labels[i]


def run(tracker_factory, steps=30):
    seed(66)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    dev = torch.get_default_device()
    data = CroppedSignals()
    # shuffled on the host: RandomSampler's randperm would follow a GPU default device
    order = torch.randperm(len(data), generator=torch.Generator("cpu").manual_seed(66), device="cpu").tolist()
    loader = DataLoader(data, batch_size=64, sampler=order, num_workers=0)
    batches = iter(loader)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = next(batches, (None, None))
            if x is None:  # an epoch ended: the next one (the cache stays)
                batches = iter(loader)
                x, y = next(batches)
            x, y = x.to(dev), y.to(dev)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
