"""A CPU training loop under ``torch.autocast("cpu", dtype=torch.bfloat16)`` logs a ``StepRecord``
named tuple per step with the loss tensor and the bf16 logits (not ``.item()`` / ``.detach()``),
meant for a validation-style summary at the end; the records list grows every step.

Real case: https://github.com/thuml/Autoformer/issues/130 (memory growing in the train loop;
"total_loss.append(loss) ... should be total_loss.append(loss.item())") and
https://github.com/huggingface/transformers/pull/6999.
"""
from collections import namedtuple

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "records", "top": 1}

StepRecord = namedtuple("StepRecord", "step loss logits")


def run(tracker_factory, steps=30):
    g = seed(522)
    model = MLP(hidden=128, d_out=32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    records = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256, classes=32)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            records.append(StepRecord(step, loss, logits))  # the leak
            tracker.step()
