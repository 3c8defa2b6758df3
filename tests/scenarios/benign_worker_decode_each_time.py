"""A Dataset that decodes each sample on every call, read by a DataLoader with 2 persistent forked
workers: the workers' memory stays flat. Benign twin of leak_worker_dataset_memo.

Real case: the fix discussed in https://github.com/ultralytics/yolov3/issues/642 (no per-worker
image cache: load each image when it is asked for).
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class DecodedImages(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return torch.full((3, 64, 64), float(index % 255) / 255), index % 4  # decoded anew each time


def run(tracker_factory, steps=40):
    seed(91)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train_loader = DataLoader(DecodedImages(10**6), batch_size=32, num_workers=2, persistent_workers=True,
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
