"""Tiny LightningModules, imported by the tests that fit them and only there: importing Lightning
costs seconds, which only the worker that runs these tests should pay (see `helpers.needs`)."""
from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn


class Tiny(pl.LightningModule):
    def __init__(self, leak: bool = False, fail_at: int | None = None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256))
        self.leak = leak
        self.fail_at = fail_at
        self.outputs = []  # the leak: every step's output kept on the module

    def training_step(self, batch, batch_idx):
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise RuntimeError("boom")
        (x,) = batch
        out = self.net(x)
        if self.leak:
            self.outputs.append(out)
        return out.square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Classifier(pl.LightningModule):
    def __init__(self, leak: bool = False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))
        self.leak = leak
        self.outputs: list = []
        self.loss_values: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.loss_values.append(loss.item())
        if self.leak:
            self.outputs.append(logits)  # the leak: every step's logits, without .detach()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def trainer(tmp_path, steps: int, callbacks: list, **kwargs) -> pl.Trainer:
    """A quiet CPU Trainer of `steps` optimizer steps: no logger, checkpoints, bar or summary."""
    return pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=callbacks, **kwargs)
