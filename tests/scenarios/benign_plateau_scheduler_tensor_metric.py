"""``ReduceLROnPlateau.step`` is handed the loss *tensor* every step (with its graph, not
``.item()``), and the last learning rates are read with ``get_last_lr()`` into a short list of
floats that is reset every 10 steps. The scheduler converts the metric with ``float(metrics)`` and
keeps only ``best`` (a float), so the tensor and its graph die with the step: memory is flat.

Real case: "Add tensor and Variable support for ReduceLROnPlateau scheduler's metric"
https://github.com/pytorch/pytorch/issues/3639 (passing tensors to the scheduler; the scheduler
converts to a Python number) and "Memory leak in ReduceLROnPlateau ?"
https://github.com/pytorch/pytorch/issues/17630 (suspected scheduler leak).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(118)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
    lr_window = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step(loss)  # a tensor with grad_fn; converted to float inside
            lr_window.append(sched.get_last_lr()[0])
            if len(lr_window) == 10:
                lr_window.clear()
            tracker.step()
