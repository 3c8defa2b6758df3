"""Tiny Hugging Face fits (a GPT-2 built from a config, no download), imported by the tests that
run them and only there: importing transformers' Trainer costs seconds, which only the worker
that runs these tests should pay (see `helpers.needs`)."""
from __future__ import annotations

import torch
import transformers


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=32, seq=16, vocab=1000):
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class MetricTrainer(transformers.Trainer):
    """The user's Trainer: records each step's loss; `leak` keeps the loss tensor itself, or with
    "module_cache" a tensor a step on the first block (`transformer.h.0.cache`)."""

    def __init__(self, *args, leak=False, fail_at=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.leak, self.fail_at = leak, fail_at
        self.loss_values: list[float] = []
        self.batch_losses: list = []

    def compute_loss(self, *args, **kwargs):
        if self.fail_at is not None and len(self.loss_values) == self.fail_at:
            raise RuntimeError("boom")
        loss = super().compute_loss(*args, **kwargs)
        self.loss_values.append(loss.item())
        if self.leak == "module_cache":
            block = self.model.transformer.h[0]
            block.cache = [*getattr(block, "cache", []), torch.ones(4096)]
        elif self.leak:
            self.batch_losses.append(loss)  # the leak: a metric list of undetached losses
        return loss


def tiny_gpt2() -> transformers.GPT2LMHeadModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=1000, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def training_args(tmp_path, steps: int, **kwargs) -> transformers.TrainingArguments:
    """Arguments for a quiet CPU fit of `steps` optimizer steps, batches of 8."""
    return transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), max_steps=steps, per_device_train_batch_size=8, learning_rate=1e-3,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, **kwargs)
