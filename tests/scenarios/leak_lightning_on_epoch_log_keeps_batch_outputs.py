"""A hand-written copy of the PyTorch Lightning 1.0 training loop. ``training_step`` returns a dict with
the loss and, for a custom epoch-end summary, the batch's detached logits and embeddings, and it logs
a value with ``self.log(..., on_step=False, on_epoch=True)``. Because an epoch-level metric was logged,
the loop keeps every batch's output for epoch-end aggregation: ``epoch_output.append(batch_output)``.
The outputs are detached (no graph), but an epoch here is far longer than the run, so the trainer's
``epoch_output`` list holds every step's logits and embeddings.

Real case: Lightning-AI/pytorch-lightning https://github.com/Lightning-AI/pytorch-lightning/issues/4556
("Gpu memory leak with self.log on_epoch=True": a ``self.log(..., on_step=False, on_epoch=True)`` makes
the loop append each ``batch_output`` to ``epoch_output``, and "inside batch_output there is a surprise
- loss value stored on gpu").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "epoch_output", "top": 1}


class LitEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)
        self._logged = {}

    def log(self, name, value, on_step=True, on_epoch=False):
        self._logged[name] = (float(value), on_step, on_epoch)

    def training_step(self, batch, batch_idx):
        x, y = batch
        emb = self.backbone(x)
        logits = self.head(emb)
        loss = nn.functional.cross_entropy(logits, y)
        self.log("train_acc", (logits.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)
        return {"loss": loss, "logits": logits.detach(), "embeddings": emb.detach()}


class Trainer:
    def __init__(self, tracker):
        self.tracker = tracker

    def fit(self, module, opt, g, steps, epoch_len=10_000):
        epoch_output = []
        for batch_idx in range(steps):
            batch = (torch.randn(64, 128, generator=g), torch.randint(0, 10, (64,), generator=g))
            batch_output = module.training_step(batch, batch_idx)
            opt.zero_grad()
            batch_output["loss"].backward()
            opt.step()
            batch_output["loss"] = batch_output["loss"].detach()
            if any(on_epoch for _v, _s, on_epoch in module._logged.values()):
                epoch_output.append(batch_output)  # kept for the epoch-end aggregation
            if (batch_idx + 1) % epoch_len == 0:
                epoch_output = []
            self.tracker.step()


def run(tracker_factory, steps=30):
    g = seed(745)
    module = LitEncoder()
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    with tracker_factory(module, optimizer=opt) as tracker:
        Trainer(tracker).fit(module, opt, g, steps)
