"""A transformer fed batches of random sequence lengths: memory goes up and down, not a leak.

Real case: dynamic input shapes, https://github.com/pytorch/pytorch/issues/29893 ("Memory leak when
evaluating model on CPU with dynamic size tensor input") and
https://github.com/pytorch/pytorch/issues/98688 (a cache that stops growing at its capacity).
"""
import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(23)
    model = TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            length = int(torch.randint(4, 48, (1,), generator=g))
            tokens = torch.randint(0, 50, (8, length), generator=g)
            logits = model(tokens)
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            last_logits = logits.detach()  # kept until the next step only
            tracker.step()
