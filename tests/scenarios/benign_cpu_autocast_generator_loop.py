"""A generator-driven training loop under CPU autocast: ``train_steps()`` is a generator that runs
one ``torch.autocast("cpu", dtype=torch.bfloat16)`` forward/backward per ``next()`` and yields the
loss as a float. The autocast weight-cast cache is emptied whenever the (per-step) autocast region
exits, and the consumer keeps only floats in a bounded deque. Memory is flat.

Real case: the documented CPU autocast path, https://pytorch.org/docs/stable/amp.html (autocast
regions cache the casted weights and drop the cache when the outermost region exits); the leaky
bf16 counterpart in this corpus is leak_autocast_bf16_step_records (Autoformer issue #130). A
benign check for a bf16 CPU-autocast loop written as a generator.
"""
import collections

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def train_steps(model, opt, g):
    while True:
        x, y = batch(g, n=128)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield loss.item()


def run(tracker_factory, steps=30):
    g = seed(121)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    recent = collections.deque(maxlen=5)
    gen = train_steps(model, opt, g)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            recent.append(next(gen))
            tracker.step()
    gen.close()
