"""Checkpointing an EMA model every 4 steps: each save builds a half-precision CPU copy of the EMA
weights (``{k: v.to("cpu", torch.float16, copy=True)}``), serializes it with ``torch.save`` and
keeps only the newest serialized checkpoint in memory (``last_checkpoint``, for a quick rollback).
Each save allocates a fresh state-dict copy and a fresh byte buffer, which looks like growth at
every save, but the copy dies when the save returns and the previous bytes are replaced.

Real case: lucidrains/ema-pytorch https://github.com/lucidrains/ema-pytorch/issues/35 ("Memory
leak in PostHocEMA during checkpointing": ``deepcopy(ema_model).to(dtype).state_dict()`` per save
leaked; the fix copies only the state-dict values to CPU in the checkpoint dtype, as here).
"""
import io

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SAVE_EVERY = 4


def run(tracker_factory, steps=30):
    g = seed(5107)
    model = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    last_checkpoint = None
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update_parameters(model)
            if (step + 1) % SAVE_EVERY == 0:
                pkg = {k: v.to(device="cpu", dtype=torch.float16, copy=True)
                       for k, v in ema.module.state_dict().items()}
                buf = io.BytesIO()
                torch.save(pkg, buf)
                last_checkpoint = buf.getvalue()  # only the newest is kept
            tracker.step()
    return last_checkpoint is not None
