"""A forward hook that stores activations in a list and never clears it.

Real case: pytorch-grad-cam https://github.com/jacobgil/pytorch-grad-cam/issues/71
("Activations and gradients are getting accumulated in cuda device memory"), and opacus
https://github.com/meta-pytorch/opacus/issues/176 (hooks saving activations).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "activations", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(4)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    activations = []

    def save_activation(module, inputs, output):
        activations.append(output)  # the leak: never cleared, keeps the graph too

    handle = model.fc2.register_forward_hook(save_activation)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        handle.remove()
