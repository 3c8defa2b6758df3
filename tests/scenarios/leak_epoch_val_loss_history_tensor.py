"""A hand-written training loop validates at the end of every epoch and keeps a Keras-style
``history`` dict for plotting learning curves. The train loss goes in as ``loss.item()``, but the
validation loop runs without ``torch.no_grad()`` (only ``model.eval()``), sums the batch losses as
tensors and appends ``val_loss / n_batches`` itself: each epoch's entry keeps the autograd graph of
every validation batch, with the activations autograd saved for a backward that never comes. The
training steps in between are flat; memory steps up by one validation pass (about 1 MiB here) once
per epoch, every 12 steps, and never comes back.

Real case: skorch-dev/skorch https://github.com/skorch-dev/skorch/issues/218 ("I narrowed down the
source to be the validation step. After each validation batch the GPU memory consumption increases
until nothing in left"; fixed by running validation under ``torch.no_grad()``) and
https://github.com/pytorch/pytorch/issues/64586 ("after every epoch, the memory increase ... .item()
should be added").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "history", "top": 1}
EPOCH = 12
VAL_BATCHES = 4


def run(tracker_factory, steps=60):
    g = seed(5701)
    model = MLP(hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    val_set = [batch(g, n=128) for _ in range(VAL_BATCHES)]
    history = {"train_loss": [], "val_loss": []}
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
                for xv, yv in val_set:  # the bug: no torch.no_grad() around validation
                    val_loss = val_loss + nn.functional.cross_entropy(model(xv), yv)
                model.train()
                history["val_loss"].append(val_loss / VAL_BATCHES)  # the leak: .item()
            tracker.step()
