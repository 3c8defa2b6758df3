"""Periodic evaluation under ``torch.no_grad()`` that gathers every batch's logits for the epoch
metric and starts a fresh list at each evaluation epoch: a sawtooth bounded by one epoch.

Real case: the "validation outputs" pattern of PyTorch Lightning, where
https://github.com/Lightning-AI/pytorch-lightning/pull/16520 ("Remove memory-retaining epoch-end
hooks") replaced the framework-held ``outputs`` of ``validation_epoch_end`` by lists the user keeps
and clears in ``on_validation_epoch_end``, as in the review of
https://github.com/ray-project/ray/pull/38039 ("clear the validation outputs at the end of
validation epoch"). Here an evaluator object keeps
the detached logits and labels of the current epoch, computes accuracy over them at the epoch's
end, and empties its lists. The loop is driven by ``evaluator.step``; no optimizer.
"""
import torch

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
EVAL_BATCHES = 5


class Evaluator:
    def __init__(self, model):
        self.model = model
        self.step_logits, self.step_labels = [], []
        self.history = []

    def step(self, x, y):
        with torch.no_grad():
            self.step_logits.append(self.model(x))
        self.step_labels.append(y)
        if len(self.step_logits) == EVAL_BATCHES:  # on_validation_epoch_end
            preds = torch.cat(self.step_logits).argmax(-1)
            self.history.append(float((preds == torch.cat(self.step_labels)).float().mean()))
            self.step_logits.clear()
            self.step_labels.clear()


def run(tracker_factory, steps=30):
    g = seed(50)
    model = MLP(hidden=128, d_out=64)
    model.eval()
    evaluator = Evaluator(model)
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128, classes=64)
            evaluator.step(x, y)
            tracker.step()
