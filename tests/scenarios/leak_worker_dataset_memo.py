"""A Dataset that memoizes each decoded sample on ``self`` in ``__getitem__``, read by a DataLoader
with 2 persistent forked workers: each worker fills a cache of its own, for as long as it lives.

Real case: https://github.com/ultralytics/yolov3/issues/642 (images cached with
``self.imgs[index] = img`` in each DataLoader worker independently: 16 workers x 10k images stalls
a 32 GB machine) and https://github.com/szymonmaszke/torchdatasets/issues/26 (a memory cache in a
Dataset does not survive, nor share, across a multi-process DataLoader's workers). The main
process's memory stays flat: what grows is each worker's own memory (its RSS), about 1.5 MiB a
batch here, far past the host's memory by the end of the epoch.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "host_growth", "location": "train_loader (DataLoader workers)", "top": 1}


class DecodedImages(Dataset):
    def __init__(self, n):
        self.n = n
        self.imgs = {}

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if index not in self.imgs:  # the leak: every decoded image stays, in every worker
            self.imgs[index] = torch.full((3, 64, 64), float(index % 255) / 255)
        return self.imgs[index], index % 4


def run(tracker_factory, steps=40):
    seed(91)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train_loader = DataLoader(DecodedImages(4 * 10**6), batch_size=32, num_workers=2, persistent_workers=True,
                              multiprocessing_context="fork")
    batches = iter(train_loader)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = next(batches)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    del batches  # the workers exit
