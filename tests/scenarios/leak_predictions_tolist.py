"""Every batch's class probabilities kept as Python lists (``probs.tolist()``) for the whole run.
No tensor is kept: ``.tolist()`` copies the values into Python floats, but each row becomes a list
of float objects (tens of bytes a number instead of four), in pymalloc's arenas, so RSS grows by
hundreds of kilobytes a step while no tensor count moves and the C heap barely does.

Real case: https://github.com/senwu/emmental/issues/121 ("the evaluation code ... is storing huge
dicts and arrays of the ground truth labels, predicted labels, and probabilities ... quickly eats up
memory and kills the job"; fixed by keeping the scores instead), and
https://github.com/delira-dev/delira/pull/185 ("Fixes a memory leak during the prediction phase
during training" by freeing the kept predictions).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "all_probs", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(71)
    model = MLP(hidden=128, d_out=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    all_probs = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=256, classes=32)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            all_probs.append(logits.detach().softmax(-1).tolist())  # the leak: kept for the whole run
            tracker.step()
