"""The fixed form of the epoch-end validation history: validation still runs without
``torch.no_grad()`` (so each pass builds a graph over the validation batches), but the ``history``
dict gets ``(val_loss / n).item()``, a float, and the loop keeps only the latest pass's outputs
(``last_val_logits``, with their graph, for a confusion-matrix plot) until the next epoch replaces
them. Memory steps up at the first validation and then stays: one pass's graph at most, however
long the run.

Real case: the fix discussed in skorch-dev/skorch https://github.com/skorch-dev/skorch/issues/218
and https://github.com/pytorch/pytorch/issues/64586 ("I had already found where the problem is,
.item() should be added").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
EPOCH = 12
VAL_BATCHES = 4


def run(tracker_factory, steps=60):
    g = seed(5702)
    model = MLP(hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    val_set = [batch(g, n=128) for _ in range(VAL_BATCHES)]
    history = {"train_loss": [], "val_loss": []}
    last_val_logits = None
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history["train_loss"].append(loss.item())
            if step % EPOCH == EPOCH - 1:
                model.eval()
                val_loss = 0.0
                outs = []
                for xv, yv in val_set:
                    logits = model(xv)
                    outs.append(logits)
                    val_loss = val_loss + nn.functional.cross_entropy(logits, yv)
                model.train()
                history["val_loss"].append((val_loss / VAL_BATCHES).item())
                last_val_logits = torch.cat(outs)  # replaced each epoch: one pass kept at most
            tracker.step()
    del last_val_logits
