"""The Lightning callback on CPU: a tiny LightningModule, no downloads. A leaking and a clean fit,
with losses compared to an untracked one, are in tests/stacks/test_lightning_fit.py."""
import pytest
import torch

import memleak
from helpers import import_error_without, needs

pytestmark = [*needs("lightning"), pytest.mark.filterwarnings("ignore:.*LeafSpec")]  # lightning's own noise

LEVEL = "full"


def loader(n=64):
    ds = torch.utils.data.TensorDataset(torch.randn(n * 128, 64))
    return torch.utils.data.DataLoader(ds, batch_size=128)


def fit(tmp_path, module, steps=40, **trainer_kwargs):
    from lightning_fits import trainer
    from memleak.integrations.lightning import MemleakCallback

    cb = MemleakCallback(out=tmp_path / "memleak", level=LEVEL, print_report=False)
    trainer(tmp_path, steps, [cb], **trainer_kwargs).fit(module, loader())
    return cb


def tiny(**kwargs):
    from lightning_fits import Tiny

    return Tiny(**kwargs)


def test_one_iteration_per_optimizer_step_with_gradient_accumulation(tmp_path):
    cb = fit(tmp_path, tiny(), steps=10, accumulate_grad_batches=3)
    assert len(cb.report.run.steps) == 10


def test_default_out_is_under_the_trainer_root(tmp_path):
    from lightning_fits import trainer
    from memleak.integrations.lightning import MemleakCallback

    cb = MemleakCallback(level="counters", print_report=False)
    trainer(tmp_path, 5, [cb]).fit(tiny(), loader())
    assert (tmp_path / "memleak" / "run.jsonl").is_file()


def test_a_fit_that_raises_closes_the_tracker_and_keeps_the_run(tmp_path):
    module = tiny(fail_at=7)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, module)
    run = memleak.load(tmp_path / "memleak")
    assert len(run.steps) == 7
    # every hook the tracker installed is gone
    assert not [m for m in module.modules() if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks]


def test_prints_the_report(tmp_path, capsys):
    from lightning_fits import trainer
    from memleak.integrations.lightning import MemleakCallback

    cb = MemleakCallback(out=tmp_path / "m", level="counters")
    trainer(tmp_path, 12, [cb]).fit(tiny(), loader())
    out = capsys.readouterr().out
    assert "memleak report:" in out and "verdict:" in out


def test_missing_lightning_names_the_extra():
    out = import_error_without("memleak.integrations.lightning",
                               ('lightning', 'lightning.pytorch', 'pytorch_lightning'))
    assert "pip install 'memleak[lightning]'" in out
