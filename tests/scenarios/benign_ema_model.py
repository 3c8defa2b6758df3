"""An exponential moving average of the weights: the EMA copy is made once, then updated in place.

Real case: the ``ModelEmaV2`` pattern of timm (``self.module = deepcopy(model)``, then
``ema_v.copy_(...)`` under ``torch.no_grad()``, see
https://github.com/NVlabs/FasterViT/issues/24 for its traceback) and YOLOv5's EMA,
https://github.com/ultralytics/yolov5/issues/8657 ("CUDA memory usage should be stable after the
first epoch ... as the EMA is validated but afterwards ... stay constant"). The copy is a second
set of weights alive for the whole run, created before the loop; the EMA model is evaluated every
few steps without gradients.
"""
import copy

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ModelEma:
    def __init__(self, model, decay=0.99):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for ema_v, v in zip(self.module.state_dict().values(), model.state_dict().values(), strict=True):
            ema_v.copy_(self.decay * ema_v + (1.0 - self.decay) * v)


def run(tracker_factory, steps=30):
    g = seed(33)
    model = MLP(hidden=128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ema = ModelEma(model)
    ema_acc = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update(model)
            if step % 5 == 4:
                with torch.no_grad():
                    ema_acc.append((ema.module(x).argmax(1) == y).float().mean().item())
            tracker.step()
