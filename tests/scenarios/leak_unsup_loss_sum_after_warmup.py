"""Semi-supervised training with a supervised warm-up: for the first 12 steps only the labeled loss
is used; from then on pseudo-labels are made for an unlabeled batch of 256 and a consistency loss
on a noised copy is added. The pseudo-labelling forward is run without ``torch.no_grad()`` (its
outputs are only used through ``argmax``/``max``, so training is unaffected), and the trainer's
meter logs the mean pseudo-label confidence as ``self.meter.conf_total += conf.mean()`` -- a
tensor, not ``.item()``. That forward is never backwarded, so from step 12 on each step's
pseudo-labelling graph, with its saved activations, is chained onto the running sum and kept.
Memory is flat for the warm-up and grows linearly afterwards; the supervised part never leaks.

Real case: the warm-up of semi-supervised detectors (PseCo,
https://github.com/ligang-cs/PseCo/issues/24: "the first 5000 iterations are warm-up, only fully
supervised; after 5000 it is semi-supervised", where the loss curves change at the switch), and the
leak pattern of https://github.com/BatsResearch/labelmodels/issues/4 (``running_loss`` summed from
non-detached tensors holds the graph of every batch; fixed with ``running_loss += loss.item()``).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "conf_total", "top": 1}
WARMUP = 12


class Meter:
    def __init__(self):
        self.sup_total = 0.0
        self.conf_total = 0.0
        self.n = 0


class Trainer:
    def __init__(self):
        self.meter = Meter()


def run(tracker_factory, steps=30):
    g = seed(404)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    trainer = Trainer()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            trainer.meter.sup_total += loss.item()
            if step >= WARMUP:
                xu = torch.randn(256, 64, generator=g)
                probs = model(xu).softmax(-1)  # missing torch.no_grad()
                conf, pseudo = probs.max(-1)
                noisy = xu + 0.1 * torch.randn(xu.shape, generator=g)
                mask = (conf.detach() > 0.0).float()
                unsup_loss = (nn.functional.cross_entropy(model(noisy), pseudo, reduction="none") * mask).mean()
                loss = loss + unsup_loss
                trainer.meter.conf_total += conf.mean()  # the leak: conf.mean().item()
            trainer.meter.n += 1
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
