"""A DataLoader with two worker processes and ``persistent_workers=False`` (the default): every
epoch's ``for batch in loader`` forks two new workers, and they are shut down when the epoch's
iterator is exhausted. Each epoch's start costs a fork, new queues and pipes; the previous epoch's
iterator, its workers and their queues are gone by then. Memory in the training process is flat
from one epoch to the next, whatever ``top`` shows for the short-lived children.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/19355 ("DataLoader consumes
much more memory than needed": "for batch in dataloader: # Here worker processes are created ...
# Here worker processes are disposed").
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class SyntheticFeatures(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 4


def run(tracker_factory, steps=30):
    seed(5709)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(
        SyntheticFeatures(),
        batch_size=64,
        shuffle=True,
        num_workers=2,
        persistent_workers=False,
        generator=torch.Generator().manual_seed(0),
    )
    done = 0
    with tracker_factory(model, optimizer=opt) as tracker:
        while done < steps:
            for x, y in loader:  # workers forked here, shut down when the epoch ends
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
                done += 1
                if done == steps:
                    break
