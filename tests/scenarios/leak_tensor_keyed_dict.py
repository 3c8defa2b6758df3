"""A debugging registry that names tensors, keyed by the tensors themselves: every layer output
becomes a dict key, and a key keeps its tensor alive.

Real case: pytorch_memlab https://github.com/Stonesjtu/pytorch_memlab/issues/17 ("The
``tensor_name`` and ``tensor_device`` mapping dict maintains a reference to the key / value tensor,
which prevents python collecting unused tensors"; fixed in
https://github.com/Stonesjtu/pytorch_memlab/pull/18). Here forward hooks on each layer record
``tensor_names[output] = layer_name`` so that a memory report can say which layer made which
tensor; the registry is never cleared.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "tensor_names", "top": 1}

#: tensor -> the layer that produced it, for a memory report (the leak: keys are never dropped)
tensor_names = {}


def name_outputs(model):
    handles = []
    for name, layer in model.named_children():
        def hook(module, inputs, output, name=name):
            tensor_names[output] = name

        handles.append(layer.register_forward_hook(hook))
    return handles


def run(tracker_factory, steps=30):
    g = seed(32)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tensor_names.clear()
    handles = name_outputs(model)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=48)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        for h in handles:
            h.remove()
        tensor_names.clear()
