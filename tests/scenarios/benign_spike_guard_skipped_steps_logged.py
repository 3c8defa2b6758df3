"""The fixed loss-spike guard: batches whose loss jumps far above its running average are skipped
(no backward, no update), and the post-mortem list ``skipped`` keeps ``(step, loss.item())`` only.
The skipped batch's graph goes when ``loss`` is rebound on the next step. Skips come at random
steps, so memory shows a skipped step's forward pass now and then, but nothing builds up.

Real case: the skip-on-bad-loss pattern of hulianyuyy/Temporal-Lift-Pooling
https://github.com/hulianyuyy/Temporal-Lift-Pooling/issues/5 and allenai/olmoearth_pretrain
https://github.com/allenai/olmoearth_pretrain/issues/135 ("Skip batch when loss goes to nan"),
with only the scalar kept.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SPIKE = 3.0


def run(tracker_factory, steps=60):
    g = seed(5704)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    running = None
    skipped = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            if step >= 4 and torch.rand((), generator=g).item() < 0.15:
                x = x * 50.0
            loss = nn.functional.cross_entropy(model(x), y)
            value = loss.item()
            if running is not None and value > SPIKE * running:
                skipped.append((step, value))
                tracker.step()
                continue
            opt.zero_grad()
            loss.backward()
            opt.step()
            running = value if running is None else 0.9 * running + 0.1 * value
            tracker.step()
