"""A loss history turned on once a warm-up ends, halfway through the run: the losses are kept as
tensors (with their graphs), so memory is flat at first and grows from then on.

Real case: the PyTorch FAQ https://pytorch.org/docs/stable/notes/faq.html ("Don't accumulate
history across your training loop") and
https://discuss.pytorch.org/t/cuda-out-of-memory-after-more-than-8000-iterators/27253 (out of
memory only after thousands of iterations). Here the history starts late, so early samples see
nothing and a short run has half its steps to show the growth.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "loss_hist", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(13)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_hist = []
    warmup = steps // 2
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= warmup:
                loss_hist.append(loss)  # the leak: loss_hist.append(loss.item())
            tracker.step()
