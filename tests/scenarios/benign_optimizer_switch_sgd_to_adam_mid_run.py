"""Training that switches optimizer part-way through (SWATS-style, here SGD with momentum for a
warm start, then Adam): at the switch step a new ``torch.optim.Adam`` is built over the same
parameters and the SGD optimizer is dropped. Adam's first step allocates two moment buffers per
parameter while SGD's momentum buffers are freed, so memory jumps once, by the size of the
parameters, half-way through the run, and is flat before and after: one step, not a trend.

Real case: Mrpatekful/swats https://github.com/Mrpatekful/swats/issues/19 ("How to adjust lr when
optimizer changed from Adam to SGD") and pytorch/pytorch https://github.com/pytorch/pytorch/issues/9439
("OOM when using Adam optimizer compared to SGD when using same batch size": Adam keeps two state
tensors per parameter).
"""

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(5713)
    model = MLP(hidden=1024)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    switch_at = steps // 2
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step == switch_at:
                opt = torch.optim.Adam(model.parameters(), lr=1e-4)  # the SGD optimizer is dropped here
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
