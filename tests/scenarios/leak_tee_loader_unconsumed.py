"""The batch iterator is split with ``itertools.tee`` (one copy trains, the other was meant for a
look-ahead that only ever reads the first batch): tee buffers every item until all its copies have
read it, so each batch stays alive in tee's shared buffer for the rest of the run.

Real case: https://github.com/kipoi/kipoi/pull/277 ("before, the iter_cycle was used with
``itertools.tee`` method. This caused the dataloader to keep the loaded samples in memory"), and
https://github.com/danish-foundation-models/site/pull/99 ("It seems like the tee operator has to be
emptied otherwise the duplicate is kept in memory"). Here the loader is a ``DataLoader`` over an
in-memory dataset; the second copy reads one batch up front (to size the model's first layer)
and is then left alone.
"""
import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "peek", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(61)
    data = TensorDataset(torch.randn(64 * (steps + 2), DIM, generator=g),
                         torch.randint(0, 4, (64 * (steps + 2),), generator=g))
    loader = DataLoader(data, batch_size=64, shuffle=True, generator=g)
    batches, peek = itertools.tee(iter(loader))  # the leak: `peek` never advances past the first batch
    d_in = next(peek)[0].shape[1]
    model = MLP(d_in=d_in, hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _, (x, y) in zip(range(steps), batches):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
