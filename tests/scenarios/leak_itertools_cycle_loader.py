"""An endless batch stream made with ``itertools.cycle(loader)``: ``cycle`` saves a reference to every
item it yields on its first pass, so that it can replay them, and a DataLoader's batches are new
tensors each time: every batch drawn stays alive inside the cycle object for the whole run.

Real case: https://github.com/pytorch/pytorch/issues/23900 ("Memory leak when using
itertools.cycle"), https://github.com/bytedance/UNO/issues/64 ("``itertools.cycle()`` internally
caches every yielded item to enable looping"; fixed by iterating the DataLoader directly) and
https://github.com/cgtuebingen/SSS-GS/pull/7 ("Fix RAM leak caused by itertools.cycle in
dataloader").
"""
import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "train_batches", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(83)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 128 * max(steps + 8, 40)  # longer than the run: the first pass never ends
    data = TensorDataset(torch.randn(n, DIM, generator=g), torch.randint(0, 4, (n,), generator=g))
    loader = DataLoader(data, batch_size=128, shuffle=True, generator=g)
    train_batches = itertools.cycle(loader)  # the leak: cycle keeps every batch it has yielded
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = next(train_batches)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
