"""Predictions kept as numpy arrays made with ``.detach().cpu().numpy()``: on a CPU tensor ``.cpu()``
is a no-op and ``.numpy()`` shares the tensor's storage, so every kept array keeps a whole
activation buffer alive (here the full hidden features a retrieval eval keeps "as numpy").

The arrays are invisible to Python's garbage collector (numpy arrays do not take part in it), so
no referrer search finds them: only a walk that follows an array to its ``base`` does.

Real case: https://github.com/pytorch/tutorials/pull/485 ("The torch tensor and numpy array
shares the memory only if the torch tensor is on CPU") and https://github.com/pytorch/pytorch/pull/2164
("Document how Numpy memory management works": the array keeps the tensor's memory alive); the
eval-time leak of https://github.com/KaiyangZhou/deep-person-reid/pull/493 (per-batch tensors
kept in lists held whole batches in RAM); the very loop ``result.append(output.data.cpu().numpy())``
is in https://github.com/pytorch/pytorch/issues/13613 (on CUDA ``.cpu()`` copies; on CPU it does not).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "embeddings", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(41)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    embeddings = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            h = torch.relu(model.fc1(x))
            logits = model.head(torch.relu(model.fc2(h)))
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            embeddings.append(h.detach().cpu().numpy())  # the leak: the arrays share h's storage
            tracker.step()
