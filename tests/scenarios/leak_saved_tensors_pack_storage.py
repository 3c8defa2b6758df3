"""A ``saved_tensors_hooks`` pair whose pack hook puts each saved tensor in a module-level list
and returns its index, the list never cleared: every activation autograd saves, every step,
stays in the list after backward has used it.

Real case: the storage example of PyTorch's "Hooks for autograd saved tensors" tutorial
(https://pytorch.org/tutorials/intermediate/autograd_saved_tensors_hooks_tutorial.html, a pack
hook ``storage.append(x); return len(storage) - 1``), and "lambda saved_tensor_hook memory
leak?" https://github.com/pytorch/pytorch/issues/115255 where saved-tensor hooks in a training
loop left GPU memory growing. Here the hook pair is used around each forward with a storage
that outlives the step.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "storage", "top": 1}

storage = []


def pack(x):
    storage.append(x)  # the leak: one more saved tensor each time autograd saves one
    return len(storage) - 1


def unpack(i):
    return storage[i]


def run(tracker_factory, steps=30):
    g = seed(63)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    storage.clear()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    storage.clear()
