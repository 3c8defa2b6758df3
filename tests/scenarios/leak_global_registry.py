"""A module-level dict used as a feature cache, keyed by batch index, that is never evicted.

Real case: chemprop https://github.com/chemprop/chemprop/issues/32 ("memory leakage when
inference": a global ``SMILES_TO_GRAPH`` cache filled RAM), and the DeepEP ``_handle_cache``
question https://github.com/pytorch/torchtitan/issues/2273.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

FEATURE_CACHE = {}

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "FEATURE_CACHE", "top": 1}


def featurize(x, key):
    if key not in FEATURE_CACHE:
        FEATURE_CACHE[key] = torch.cat([x, x.pow(2)], dim=-1)  # the leak: a new key every step
    return FEATURE_CACHE[key]


def run(tracker_factory, steps=30):
    g = seed(10)
    FEATURE_CACHE.clear()
    model = MLP(d_in=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(featurize(x, key=step)), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        FEATURE_CACHE.clear()
