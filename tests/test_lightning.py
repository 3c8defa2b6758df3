"""The Lightning callback on CPU: a tiny LightningModule, no downloads. A leaking and a clean fit,
with losses compared to an untracked one, are in tests/stacks/test_lightning_fit.py."""
import pytest
import torch
from torch import nn

pl = pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec")  # lightning's own deprecation noise

import memleak  # noqa: E402
from helpers import import_error_without  # noqa: E402
from memleak.integrations.lightning import MemleakCallback  # noqa: E402

LEVEL = "full"


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


def loader(n=64):
    ds = torch.utils.data.TensorDataset(torch.randn(n * 128, 64))
    return torch.utils.data.DataLoader(ds, batch_size=128)


def fit(tmp_path, module, steps=40, **trainer_kwargs):
    cb = MemleakCallback(out=tmp_path / "memleak", level=LEVEL, print_report=False)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[cb], **trainer_kwargs)
    trainer.fit(module, loader())
    return cb


def test_one_iteration_per_optimizer_step_with_gradient_accumulation(tmp_path):
    cb = fit(tmp_path, Tiny(), steps=10, accumulate_grad_batches=3)
    assert len(cb.report.run.steps) == 10


def test_default_out_is_under_the_trainer_root(tmp_path):
    cb = MemleakCallback(level="counters", print_report=False)
    trainer = pl.Trainer(max_steps=5, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[cb])
    trainer.fit(Tiny(), loader())
    assert (tmp_path / "memleak" / "run.jsonl").is_file()


def test_a_fit_that_raises_closes_the_tracker_and_keeps_the_run(tmp_path):
    module = Tiny(fail_at=7)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, module)
    run = memleak.load(tmp_path / "memleak")
    assert len(run.steps) == 7
    # every hook the tracker installed is gone
    assert not [m for m in module.modules() if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks]


def test_prints_the_report(tmp_path, capsys):
    cb = MemleakCallback(out=tmp_path / "m", level="counters")
    trainer = pl.Trainer(max_steps=12, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[cb])
    trainer.fit(Tiny(), loader())
    out = capsys.readouterr().out
    assert "memleak report:" in out and "verdict:" in out


def test_missing_lightning_names_the_extra():
    out = import_error_without("memleak.integrations.lightning",
                               ('lightning', 'lightning.pytorch', 'pytorch_lightning'))
    assert "pip install 'memleak[lightning]'" in out
