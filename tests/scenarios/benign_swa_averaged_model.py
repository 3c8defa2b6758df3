"""Stochastic Weight Averaging started part-way through the run: at ``swa_start`` an
``AveragedModel`` (a deep copy of the weights) is created and from then on updated in place every
few steps, and the LR switches to ``SWALR``. Memory steps up once, by one copy of the weights,
when averaging starts, then stays flat.

Real case: ``torch.optim.swa_utils`` (``AveragedModel``, ``SWALR``, ``update_parameters``),
https://docs.pytorch.org/docs/stable/optim.html#weight-averaging-swa-and-ema, and Composer's SWA
algorithm, https://docs.mosaicml.com/projects/composer/en/latest/_modules/composer/algorithms/swa/swa.html
("averages model weights sampled at different times near the end of training ... it doubles the
model's memory consumption"). The averaged copy is made lazily at ``swa_start`` (a third into the
run), updated every 3 steps, and evaluated without gradients.
"""
import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30, start=1 / 3):
    g = seed(61)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    swa_start = max(int(steps * start), 5)
    swa_model = None
    swa_sched = None
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= swa_start:
                if swa_model is None:
                    swa_model = AveragedModel(model)
                    swa_sched = SWALR(opt, swa_lr=0.01, anneal_epochs=3)
                if step % 3 == 0:
                    swa_model.update_parameters(model)
                    with torch.no_grad():
                        swa_model(x).argmax(-1)
                swa_sched.step()
            else:
                sched.step()
            tracker.step()
