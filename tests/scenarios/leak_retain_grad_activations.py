"""Intermediate activations marked with ``retain_grad()`` and kept in a list to inspect their
gradients later: each kept activation holds its ``.grad`` (as large as itself) and its graph,
step after step.

Real case: "Save the gradient of the intermediate tensor"
https://discuss.pytorch.org/t/save-the-gradient-of-the-intermediate-tensor/190094 (keeping the
gradients of intermediate tensors for later use), with the ``retain_grad()`` debugging idiom of
https://openillumi.com/en/en-pytorch-retain-grad-inplace-error-fix ; the activations are kept
whole, with their gradient and graph, rather than a detached summary.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "inspected", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(68)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    inspected = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=96)
            h = torch.relu(model.fc1(x))
            h.retain_grad()
            logits = model.head(torch.relu(model.fc2(h)))
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            inspected.append(h)  # the leak: h with its .grad and graph, for "later"
            tracker.step()
