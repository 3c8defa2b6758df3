"""A sliding-window metric over the last few batches, kept as numpy arrays: each step appends the
batch's predicted probabilities and labels (copies, with memory of their own) to
``collections.deque(maxlen=8)`` and computes the window's accuracy and mean confidence from them.
Memory fills for 8 steps, then the oldest arrays fall out as new ones come: bounded.

Real pattern: the ``SlidingWindowMetrics`` class in ``src/metrics.py`` of
https://github.com/ramasheshasai/Online-Learning-Algorithm-Implementation (``self.pred =
deque(maxlen=window_size)``, updated every step), and the ``deque(maxlen=window_size)`` of numpy
feature vectors in ``model_project/predict/cnn_predictor.py`` of https://github.com/Youthstudy/imurecv.
"""
from collections import deque

import numpy as np
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(44)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    probs, labels = deque(maxlen=8), deque(maxlen=8)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=256, classes=64)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            probs.append(torch.softmax(logits.detach(), 1).cpu().numpy().copy())
            labels.append(y.cpu().numpy().copy())
            p, t = np.concatenate(probs), np.concatenate(labels)
            window_acc = float((p.argmax(1) == t).mean())  # noqa: F841 (logged in a real loop)
            tracker.step()
