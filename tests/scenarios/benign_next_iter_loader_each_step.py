"""An auxiliary batch drawn every step with ``next(iter(aux_loader))`` on a shuffled DataLoader
with ``num_workers=0``: each new iterator's ``RandomSampler`` materializes
``torch.randperm(n).tolist()`` (a Python list of ``n`` ints, here n = 200,000, several MiB) and
the iterator is dropped after one batch, so the list is freed again. Memory churns by megabytes a
step but stays flat: with no worker processes nothing outlives the step.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/1917 (``next(iter(data_loader))``
to get one batch; the growth reported there came from worker processes spawned per iterator) and
https://github.com/pytorch/pytorch/pull/103339 ("when we call ``torch.randperm(n).tolist()``, we
create a python list of 3.5 billion items"), see also
https://github.com/pytorch/pytorch/issues/50201 (samplers storing lists of indices).
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(167)
    dev = torch.get_default_device()
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    n = 200_000
    cpu = torch.Generator("cpu").manual_seed(167)
    aux = TensorDataset(torch.randn(n, DIM, generator=cpu, device="cpu"), torch.randint(0, 4, (n,), generator=cpu, device="cpu"))
    aux_loader = DataLoader(aux, batch_size=64, shuffle=True, num_workers=0, generator=cpu)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            xa, ya = next(iter(aux_loader))  # a fresh sampler permutation each step, dropped after one batch
            loss = nn.functional.cross_entropy(model(x), y) + 0.1 * nn.functional.cross_entropy(model(xa.to(dev)), ya.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
