"""A running loss summed as a tensor: ``total_loss += loss`` keeps every step's graph.

Real case: the PyTorch FAQ, "My model reports cuda runtime error(2): out of memory" ->
"Don't accumulate history across your training loop" (https://pytorch.org/docs/stable/notes/faq.html),
and the forum thread https://discuss.pytorch.org/t/gpu-memory-increase-while-i-wanna-to-backward-with-accumulative-loss/43284.
After backward() the saved tensors are freed, so device bytes barely grow, but the chain of
grad_fn nodes behind ``total_loss`` grows every step.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "total_loss", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(1)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total_loss = 0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss  # the leak: should be loss.item()
            tracker.step()
