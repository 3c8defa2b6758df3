"""A real Hugging Face `Trainer` fit (a tiny GPT-2 built from a config, no download) tracked at
every level: losses bit-identical to an untracked fit, a clean fit clean, nothing left installed; a
metric list the user's Trainer subclass keeps found and named at level full (the reference walk), a
tensor cached on a submodule at level modules (the attribute scan); a fit that raises closes the
tracker at once."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer needs it

import memleak  # noqa: E402
from memleak.integrations.huggingface import MemleakCallback  # noqa: E402
from stacks.stack_harness import (  # noqa: E402
    BELOW_FULL,
    assert_fit_clean,
    assert_fits_at_level,
    assert_same_losses,
    fits_by_level,
    left_installed,
    three_fits,
)

STEPS = 30


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


def fit(tmp_path, *, tracked=True, leak=False, fail_at=None, steps=STEPS, cb=None, level="full"):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=1000, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    if tracked and cb is None:
        cb = MemleakCallback(out=tmp_path / "memleak", level=level, print_report=False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), max_steps=steps, per_device_train_batch_size=8, learning_rate=1e-3,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0)
    trainer = MetricTrainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb] if cb else [],
                            leak=leak, fail_at=fail_at)
    trainer.train()
    return trainer, cb


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    return three_fits(fit, tmp_path_factory)


def test_losses_are_bit_identical_to_an_untracked_fit(fits):
    assert_same_losses(fits, STEPS)


def test_the_metric_list_is_found_and_named(fits):
    trainer, cb = fits["leak"]
    report = cb.report
    assert report.leak, str(report)
    assert report.suspects[0].location.endswith("batch_losses"), str(report)
    assert cb.tracker is None and not left_installed([trainer.model])


def test_a_clean_fit_is_clean(fits):
    report = fits["clean"][1].report
    assert not report.leak, str(report)
    assert len(report.run.steps) == STEPS


@pytest.fixture(scope="module")
def by_level(tmp_path_factory):
    return fits_by_level(fit, tmp_path_factory, BELOW_FULL)


@pytest.mark.parametrize("level", BELOW_FULL)
def test_each_level_keeps_the_losses_and_leaves_nothing_installed(fits, by_level, level):
    assert_fits_at_level(fits, by_level, level, lambda trainer: [trainer.model])


@pytest.mark.parametrize("level", BELOW_FULL)
def test_a_clean_fit_is_clean_at_each_level(by_level, level):
    assert_fit_clean(by_level[level, None][1].report, STEPS)


def test_the_attribute_scan_names_a_tensor_cached_on_a_block_at_level_modules(by_level):
    report = by_level["modules", "module_cache"][1].report
    assert report.leak, str(report)
    assert report.suspects[0].location == "transformer.h.0.cache", str(report)


def test_a_fit_that_raises_closes_the_tracker_at_once(tmp_path):
    cb = MemleakCallback(out=tmp_path / "memleak", level="full", print_report=False)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, fail_at=7, steps=12, cb=cb)
    assert cb.tracker is None  # closed when train() raised, not at exit
    assert not left_installed([])
    run = memleak.load(tmp_path / "memleak")
    assert len(run.steps) == 7
    assert (tmp_path / "memleak" / "report.txt").is_file()
