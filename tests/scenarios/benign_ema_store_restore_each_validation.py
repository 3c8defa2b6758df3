"""Diffusers-style EMA validation: every fifth step the training script calls
``ema.store(model.parameters())`` (a CPU copy of the live weights in ``ema.temp_stored_params``),
``ema.copy_to(model.parameters())`` (evaluate with the EMA weights) and, after validation,
``ema.restore(model.parameters())``, which copies the stored weights back and drops the copy
(``temp_stored_params = None``). A full copy of the weights appears at each validation and is gone
after it; the EMA's own shadow weights are updated in place under ``no_grad``. Bounded.

Real case: huggingface/diffusers https://github.com/huggingface/diffusers/pull/2302 ("Adds store()
and restore() methods to EMAModel": "Restore the parameters stored with the store method. Useful to
validate the model with EMA parameters without affecting the original optimization process";
reviewer: "Once we are done restoring, we could just del the temp params"), and the missing
``restore()`` fixed in https://github.com/huggingface/diffusers/pull/7599.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VAL_EVERY = 5


class EMAModel:
    def __init__(self, parameters, decay=0.999):
        self.shadow_params = [p.detach().clone() for p in parameters]
        self.decay = decay
        self.temp_stored_params = None

    @torch.no_grad()
    def step(self, parameters):
        for s, p in zip(self.shadow_params, parameters):
            s.lerp_(p, 1 - self.decay)

    def store(self, parameters):
        self.temp_stored_params = [p.detach().cpu().clone() for p in parameters]

    def copy_to(self, parameters):
        for s, p in zip(self.shadow_params, parameters):
            p.data.copy_(s.data)

    def restore(self, parameters):
        for c, p in zip(self.temp_stored_params, parameters):
            p.data.copy_(c.data)
        self.temp_stored_params = None


def run(tracker_factory, steps=30):
    g = seed(2302)
    model = MLP(d_in=64, hidden=256, d_out=10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ema = EMAModel(model.parameters())
    val = [batch(g, n=128, d=64, classes=10) for _ in range(2)]
    scores = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128, d=64, classes=10)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.step(model.parameters())
            if step % VAL_EVERY == VAL_EVERY - 1:
                ema.store(model.parameters())
                ema.copy_to(model.parameters())
                with torch.no_grad():
                    scores.append(sum((model(vx).argmax(1) == vy).float().mean().item() for vx, vy in val))
                ema.restore(model.parameters())
            tracker.step()
