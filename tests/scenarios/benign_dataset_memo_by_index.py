"""The twin of leak_dataset_augment_cache: the Dataset memoizes each decoded sample by its index
alone and draws the random crop after the cache. The memo grows every step of the first epoch,
like a leak in a run shorter than an epoch, but its keys are sample indices: it stops at the
dataset's length (4096 samples here, 64 a step).

Real case: "Caching Support for class Dataset" https://github.com/pytorch/pytorch/issues/35642
(the ``self.cache[index] = sample`` memo in ``__getitem__``, filled once per sample) and
torchvision's "Load the entire dataset into memory" https://github.com/pytorch/vision/issues/8059
(cache the decoded sample, apply the random transforms after).
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class DecodedSignals(Dataset):
    def __init__(self, n: int = 4096, length: int = DIM + 16):
        # a Dataset's tensors are host tensors, also when the loop trains on a GPU
        g = torch.Generator("cpu").manual_seed(66)
        self.encoded = torch.randn(n, length, generator=g, device="cpu")
        self.labels = torch.randint(0, 4, (n,), generator=g, device="cpu")
        self.rng = torch.Generator("cpu").manual_seed(67)
        self.cache = {}

    def __len__(self):
        return len(self.encoded)

    def __getitem__(self, i):
        if i not in self.cache:  # each sample decoded once: the key is its index
            self.cache[i] = (self.encoded[i] * 1.5).clone()
        off = int(torch.randint(0, 16, (1,), generator=self.rng, device="cpu"))
        return self.cache[i][off:off + DIM], self.labels[i]


def run(tracker_factory, steps=30):
    seed(66)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    dev = torch.get_default_device()
    data = DecodedSignals()
    # shuffled on the host: RandomSampler's randperm would follow a GPU default device
    order = torch.randperm(len(data), generator=torch.Generator("cpu").manual_seed(66), device="cpu").tolist()
    loader = DataLoader(data, batch_size=64, sampler=order, num_workers=0)
    batches = iter(loader)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = next(batches, (None, None))
            if x is None:  # an epoch ended: the next one (the memo stays full)
                batches = iter(loader)
                x, y = next(batches)
            x, y = x.to(dev), y.to(dev)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
