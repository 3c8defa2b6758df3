"""Global magnitude pruning re-applied every few steps without ``prune.remove``: each call of
``prune.global_unstructured`` wraps a ``CustomFromMask`` in the module's pruning hook, and each
of those keeps its own full-size copy of the mask, so the forward-pre-hooks of every pruned
layer hold one more weight-sized tensor per pruning round.

Real case: "global_pruning costs memory after model is trained"
https://github.com/pytorch/pytorch/issues/49332 (prune, train, prune again: OOM on BERT after
some pruning rounds), and "CustomFromMask pruning stores a copy of the user-provided mask"
https://github.com/pytorch/pytorch/issues/34257 (the copy lives on the forward_pre_hook).
"""
import torch
from torch import nn
from torch.nn.utils import prune

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_forward_pre_hooks", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(64)
    model = MLP(d_in=DIM, hidden=192)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    targets = [(model.fc1, "weight"), (model.fc2, "weight")]
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 2 == 1:  # the leak: pruned again and again, never made permanent
                prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=0.01)
            tracker.step()
