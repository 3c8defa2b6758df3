"""A real Hugging Face `Trainer` fit (a tiny GPT-2 built from a config, no download) tracked at
every level: losses bit-identical to an untracked fit, a clean fit clean, nothing left installed; a
metric list the user's Trainer subclass keeps found and named at level full (the reference walk), a
tensor cached on a submodule at level modules (the attribute scan); a fit that raises closes the
tracker at once."""
from __future__ import annotations

import pytest
import torch

import memleak
from helpers import needs
from stacks.stack_harness import (
    BELOW_FULL,
    assert_fit_clean,
    assert_fits_at_level,
    assert_same_losses,
    fits_by_level,
    left_installed,
    three_fits,
)

pytestmark = needs("transformers", "accelerate")  # accelerate: the Trainer needs it

STEPS = 30


def fit(tmp_path, *, tracked=True, leak=False, fail_at=None, steps=STEPS, cb=None, level="full"):
    from hf_fits import MetricTrainer, Tokens, tiny_gpt2, training_args
    from memleak.integrations.huggingface import MemleakCallback

    model = tiny_gpt2()
    if tracked and cb is None:
        cb = MemleakCallback(out=tmp_path / "memleak", level=level, print_report=False)
    trainer = MetricTrainer(model=model, args=training_args(tmp_path, steps, seed=0), train_dataset=Tokens(),
                            callbacks=[cb] if cb else [], leak=leak, fail_at=fail_at)
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
    from memleak.integrations.huggingface import MemleakCallback

    cb = MemleakCallback(out=tmp_path / "memleak", level="full", print_report=False)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, fail_at=7, steps=12, cb=cb)
    assert cb.tracker is None  # closed when train() raised, not at exit
    assert not left_installed([])
    run = memleak.load(tmp_path / "memleak")
    assert len(run.steps) == 7
    assert (tmp_path / "memleak" / "report.txt").is_file()
