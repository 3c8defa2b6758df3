"""A real Lightning fit tracked at every level: losses bit-identical to an untracked fit, the
LightningModule's `self.outputs` kept without detach found and named (level full by the reference
walk, level modules by the attribute scan: the list is an attribute of the module), a clean fit
clean, and nothing left installed afterwards."""
from __future__ import annotations

import json
from pathlib import Path

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

pytestmark = [*needs("lightning"), pytest.mark.filterwarnings("ignore:.*LeafSpec")]  # lightning's own noise

STEPS = 30


def fit(tmp_path, *, tracked=True, leak=False, level="full"):
    """`leak`: True or "module_cache" (both: `self.outputs`, a list on the LightningModule)."""
    from lightning_fits import Classifier, trainer
    from memleak.integrations.lightning import MemleakCallback

    torch.manual_seed(0)
    module = Classifier(bool(leak))
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * 32, 32, generator=g),
                                          torch.randint(0, 4, (STEPS * 32,), generator=g))
    cb = MemleakCallback(out=tmp_path / "memleak", level=level, print_report=False) if tracked else None
    trainer(tmp_path, STEPS, [cb] if cb else []).fit(module, torch.utils.data.DataLoader(data, batch_size=32))
    return module, cb


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    return three_fits(fit, tmp_path_factory)


def test_losses_are_bit_identical_to_an_untracked_fit(fits):
    assert_same_losses(fits, STEPS)


def test_self_outputs_without_detach_is_found_and_named(fits):
    module, cb = fits["leak"]
    report = cb.report
    assert report.leak, str(report)
    assert report.suspects[0].location == "outputs", str(report)
    assert cb.tracker is None and not left_installed([module])
    out = Path(report.run.path).parent  # the callback wrote the run and the report there
    assert {"run.jsonl", "report.txt", "findings.json", "memory.png"} <= {p.name for p in out.iterdir()}
    run = memleak.load(out)
    assert len(run.steps) == STEPS and run.meta["model"] == "Classifier"
    assert json.loads((out / "findings.json").read_text())["verdict"] == "leak"


def test_a_clean_fit_is_clean_and_leaves_nothing_installed(fits):
    module, cb = fits["clean"]
    assert not cb.report.leak, str(cb.report)
    assert len(cb.report.run.steps) == STEPS
    assert not left_installed([module])


# ---------------------------------------------------------------- the levels below full

@pytest.fixture(scope="module")
def by_level(tmp_path_factory):
    return fits_by_level(fit, tmp_path_factory, BELOW_FULL)


@pytest.mark.parametrize("level", BELOW_FULL)
def test_each_level_keeps_the_losses_and_leaves_nothing_installed(fits, by_level, level):
    assert_fits_at_level(fits, by_level, level, lambda module: [module])


@pytest.mark.parametrize("level", BELOW_FULL)
def test_a_clean_fit_is_clean_at_each_level(by_level, level):
    assert_fit_clean(by_level[level, None][1].report, STEPS)


def test_the_attribute_scan_names_self_outputs_at_level_modules(by_level):
    report = by_level["modules", "module_cache"][1].report
    assert report.leak, str(report)
    assert report.suspects[0].location == "outputs", str(report)
