"""Lightning 2.0 removed ``training_epoch_end(outputs)``: its migration guide has the module keep
the losses itself (``self.training_step_outputs.append(loss)`` in ``training_step``) and clear the
list in ``on_train_epoch_end``. Without the clear (or with an epoch longer than memory allows) the
list keeps every step's loss, each with its autograd graph.

Real case: https://github.com/Lightning-AI/pytorch-lightning/pull/16520 (the migration guide:
``self.training_step_outputs.append(loss)`` ... ``self.training_step_outputs.clear()  # free
memory``), and the OOMs that epoch-end outputs caused before it,
https://github.com/Lightning-AI/pytorch-lightning/issues/15514.
"""
import torch
from torch import nn

from ._common import batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "training_step_outputs", "top": 1}


class LitClassifier(nn.Module):
    """A LightningModule's shape, without Lightning: the trainer calls training_step."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
        self.training_step_outputs = []

    def training_step(self, batch):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.training_step_outputs.append(loss)  # the leak: never cleared, and not detached
        return loss

    def on_train_epoch_end(self):  # the clear that would free them, never reached in this run
        self.training_step_outputs.clear()


def run(tracker_factory, steps=30):
    g = seed(98)
    model = LitClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            loss = model.training_step(batch(g, n=64))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
