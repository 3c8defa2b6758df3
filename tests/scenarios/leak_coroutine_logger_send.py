"""A coroutine-style logger (a generator primed with ``next`` and fed with ``.send``) keeps what it receives.

Real case: https://github.com/huggingface/transformers/pull/6999 ("fixed trainer tr_loss memory leak":
the logged loss kept its graph; the leak described in
https://discuss.pytorch.org/t/cpu-ram-usage-increasing-for-every-epoch/24475/6). The logger here is
a generator: ``window`` is a local of its suspended frame, meant to be flushed every ``flush_every``
sends, but the caller passes the threshold in samples (10 000) where steps were meant, so within a
run it never fires and the window only grows.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "window", "top": 1}


def loss_logger(flush_every):
    window = []
    summary = None
    while True:
        item = yield summary
        window.append(item)  # the leak: (loss, logits) tuples, graph and all
        if len(window) >= flush_every:
            summary = sum(float(l) for l, _ in window) / len(window)
            window = []


def run(tracker_factory, steps=30):
    g = seed(109)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    logger = loss_logger(flush_every=10_000)  # bug: samples, not steps
    next(logger)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=128)
            y = torch.randint(0, 64, (128,), generator=g)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            logger.send((loss, logits))
            tracker.step()
