"""Per-sample predictions gathered as Python lists (``.tolist()``) for the current epoch only: at
each epoch's end a metric is computed from them and the list starts empty again. Host memory
rises within an epoch and falls back at its end (pymalloc reuses the freed objects): a sawtooth
bounded by one epoch, not a leak.

Real case: the epoch-end pattern of PyTorch Lightning after
https://github.com/Lightning-AI/pytorch-lightning/pull/16520 ("Remove memory-retaining epoch-end
hooks"): the user keeps the step outputs and clears them in ``on_train_epoch_end``, as the fix of
https://github.com/senwu/emmental/issues/121 keeps the scores, not every prediction.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
EPOCH = 5


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=128, d_out=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    epoch_preds, epoch_labels, accuracy = [], [], []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256, classes=32)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            epoch_preds.extend(logits.detach().softmax(-1).tolist())
            epoch_labels.extend(y.tolist())
            if (step + 1) % EPOCH == 0:  # on_train_epoch_end: a number kept, the lists emptied
                hits = sum(max(range(len(p)), key=p.__getitem__) == t for p, t in zip(epoch_preds, epoch_labels))
                accuracy.append(hits / len(epoch_labels))
                epoch_preds.clear()
                epoch_labels.clear()
            tracker.step()
