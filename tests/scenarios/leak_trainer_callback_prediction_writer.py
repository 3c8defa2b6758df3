"""A hand-written Trainer with a list of callbacks: after each step it calls
``cb.on_step_end(trainer, outputs)``. A ``PredictionWriter`` callback buffers the step's outputs
(the loss and the logits, not detached) to write them out ``on_epoch_end``, but the trainer is
driven by ``max_steps`` and never reaches an epoch end inside the run.

Real case: https://github.com/pnnl/neuromancer/pull/292 ("Trainer has two memory leaks, both from
the same source, we're not detaching the grad graphs from the metrics before we store them").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "buffer", "top": 1}


class Callback:
    def on_step_end(self, trainer, outputs):
        pass

    def on_epoch_end(self, trainer):
        pass


class PredictionWriter(Callback):
    def __init__(self):
        self.buffer = []

    def on_step_end(self, trainer, outputs):
        self.buffer.append({"step": trainer.global_step, **outputs})  # the leak

    def on_epoch_end(self, trainer):
        torch.save([{k: v.detach() if torch.is_tensor(v) else v for k, v in o.items()} for o in self.buffer],
                   "/dev/null")
        self.buffer.clear()


class LRMonitor(Callback):
    def __init__(self):
        self.lrs = []

    def on_step_end(self, trainer, outputs):
        self.lrs.append(trainer.opt.param_groups[0]["lr"])


class Trainer:
    def __init__(self, model, opt, callbacks, steps_per_epoch=10_000):
        self.model, self.opt, self.callbacks = model, opt, callbacks
        self.global_step = 0
        self.steps_per_epoch = steps_per_epoch

    def training_step(self, x, y):
        logits = self.model(x)
        loss = nn.functional.cross_entropy(logits, y)
        return {"loss": loss, "logits": logits}

    def fit(self, batches, tracker):
        for x, y in batches:
            outputs = self.training_step(x, y)
            self.opt.zero_grad()
            outputs["loss"].backward()
            self.opt.step()
            for cb in self.callbacks:
                cb.on_step_end(self, outputs)
            self.global_step += 1
            if self.global_step % self.steps_per_epoch == 0:
                for cb in self.callbacks:
                    cb.on_epoch_end(self)
            tracker.step()


def run(tracker_factory, steps=30):
    g = seed(516)
    model = MLP(hidden=128, d_out=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = Trainer(model, opt, [LRMonitor(), PredictionWriter()])
    batches = (batch(g, n=128, classes=16) for _ in range(steps))
    with tracker_factory(model, optimizer=opt) as tracker:
        trainer.fit(batches, tracker)
