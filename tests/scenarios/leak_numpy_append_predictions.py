"""Predictions gathered for the whole run with ``np.append``: each step copies what was kept so far
and the new batch into a new, larger array. Only one array is held at any time, but it grows by a
batch of logits every step, in host memory that no tensor count sees (the array has memory of its
own: ``np.append`` copies).

Real case: https://github.com/huggingface/transformers/pull/9746 (the TF Trainer's
``prediction_loop`` kept ``preds = np.append(preds, logits.numpy(), axis=0)`` for every batch:
"the numpy.append method is not suitable for large evaluation/test dataset"), and the "CPU RAM
usage keeps growing during evaluation" reports such loops produce, e.g.
https://github.com/MeteorsHub/GLIA-Net/issues/12.
"""
import numpy as np
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "all_logits", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(43)
    model = MLP(hidden=128, d_out=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    all_logits = None
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64, classes=256)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out = logits.detach().cpu().numpy()  # shares the tensor's memory on a CPU run
            all_logits = out.copy() if all_logits is None else np.append(all_logits, out, axis=0)  # the leak
            tracker.step()
