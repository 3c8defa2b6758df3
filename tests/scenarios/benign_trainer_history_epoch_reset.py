"""A hand-written Trainer with a History callback: per step it records ``loss.item()`` floats,
at each epoch end (every 5 steps) it appends the epoch's mean to ``history.epochs`` (a few floats)
and clears the step list. Small per-epoch records, nothing per step survives.

Real case: the fix in https://github.com/huggingface/transformers/pull/6999 (log the loss as a
detached value, not the tensor) and the epoch-level history of skorch.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class History:
    def __init__(self):
        self.steps = []
        self.epochs = []

    def on_step_end(self, trainer, outputs):
        self.steps.append({"loss": outputs["loss"].item(), "acc": (outputs["logits"].argmax(1) == outputs["y"]).float().mean().item()})

    def on_epoch_end(self, trainer):
        n = len(self.steps)
        self.epochs.append({k: sum(s[k] for s in self.steps) / n for k in ("loss", "acc")})
        self.steps.clear()


class Trainer:
    def __init__(self, model, opt, callbacks, steps_per_epoch=5):
        self.model, self.opt, self.callbacks = model, opt, callbacks
        self.global_step = 0
        self.steps_per_epoch = steps_per_epoch

    def fit(self, batches, tracker):
        for x, y in batches:
            logits = self.model(x)
            loss = nn.functional.cross_entropy(logits, y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            outputs = {"loss": loss, "logits": logits, "y": y}
            for cb in self.callbacks:
                cb.on_step_end(self, outputs)
            self.global_step += 1
            if self.global_step % self.steps_per_epoch == 0:
                for cb in self.callbacks:
                    cb.on_epoch_end(self)
            tracker.step()


def run(tracker_factory, steps=30):
    g = seed(517)
    model = MLP(hidden=128, d_out=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = Trainer(model, opt, [History()])
    batches = (batch(g, n=128, classes=16) for _ in range(steps))
    with tracker_factory(model, optimizer=opt) as tracker:
        trainer.fit(batches, tracker)
