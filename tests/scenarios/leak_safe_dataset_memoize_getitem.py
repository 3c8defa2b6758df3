"""A ``SafeDataset`` wrapper (nonechucks) that skips samples which fail to decode, whose
``__getitem__`` is decorated with nonechucks' ``@memoize``: the decorator stores every return value
in a dict it creates on the instance as ``obj.__cache`` inside ``class memoize``, which Python
name-mangles to ``dataset._memoize__cache``. Each decoded image (3x32x32 floats) stays in that
dict, keyed by ``(function, (index,), frozenset())``, so memory grows by a batch of images per step
for the whole first epoch (``num_workers=0``: the cache is in the training process).

Real case: msamogh/nonechucks https://github.com/msamogh/nonechucks/issues/13 ("when the below
example is run, the RAM usage grows forever"; "``SafeDataset.__getitem__`` memoizes the dataset
items, with no parameter to change this ... Remove the ``@memoize`` line, and the leak is gone").
The decorator is nonechucks/utils.py's ``memoize`` class, reproduced here.
"""
from functools import partial

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_memoize__cache", "top": 1}


class memoize(object):
    """nonechucks.utils.memoize: caches a method's return value on the instance."""

    def __init__(self, func):
        self.func = func

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self.func
        return partial(self, obj)

    def __call__(self, *args, **kw):
        obj = args[0]
        try:
            cache = obj.__cache  # name-mangled: obj._memoize__cache
        except AttributeError:
            cache = obj.__cache = {}
        key = (self.func, args[1:], frozenset(kw.items()))
        try:
            res = cache[key]
        except KeyError:
            res = cache[key] = self.func(*args, **kw)
        return res


class DecodedImages(Dataset):
    """Stands in for an image folder: each item is "decoded" into a fresh float tensor."""

    def __init__(self, n):
        self.n = n
        self.g = torch.Generator("cpu").manual_seed(131)

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        img = torch.rand(3, 32, 32, generator=self.g, device="cpu")
        return img, idx % 10


class SafeDataset(Dataset):
    def __init__(self, dataset):
        self.dataset = dataset
        self._safe_indices = []
        self._unsafe_indices = []

    def __len__(self):
        return len(self.dataset)

    def _safe_get_item(self, idx):
        try:
            sample = self.dataset[idx]
            if idx not in self._safe_indices:
                self._safe_indices.append(idx)
            return sample
        except Exception:
            if idx not in self._unsafe_indices:
                self._unsafe_indices.append(idx)
            return None

    @memoize  # the leak: every decoded sample is kept on the wrapper
    def __getitem__(self, idx):
        return self._safe_get_item(idx)


def run(tracker_factory, steps=30):
    seed(131)
    dev = torch.get_default_device()
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dataset = SafeDataset(DecodedImages(64 * 400))
    order = torch.randperm(len(dataset), generator=torch.Generator("cpu").manual_seed(131), device="cpu").tolist()
    loader = DataLoader(dataset, batch_size=64, sampler=order, num_workers=0)
    batches = iter(loader)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = next(batches)
            x, y = x.to(dev), y.to(dev)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
