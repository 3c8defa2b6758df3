"""The healthy form of ``itertools.cycle(loader)``: an endless batch stream written as a generator
that iterates the DataLoader again at each pass, so only the batch in use is alive.

Real case: the fix in https://github.com/DeepLearnPhysics/lartpc_mlreco3d/pull/77 (a ``cycle``
generator, ``while True: for x in data_io: yield x``, in place of ``itertools.cycle``, which
"causes a memory leak").
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "ok", "kind": None, "location": None, "top": 1}


def forever(loader):
    while True:
        yield from loader


def run(tracker_factory, steps=30):
    g = seed(84)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 128 * 12  # several passes over the data within the run
    data = TensorDataset(torch.randn(n, DIM, generator=g), torch.randint(0, 4, (n,), generator=g))
    loader = DataLoader(data, batch_size=128, shuffle=True, generator=g)
    train_batches = forever(loader)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = next(train_batches)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
