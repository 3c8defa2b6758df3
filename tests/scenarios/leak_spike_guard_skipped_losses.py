"""A loss-spike guard skips the update on batches whose loss jumps far above its running average
(corrupt samples show up now and then in the data stream) and, for a post-mortem, records the
skipped losses in ``skipped_losses`` as ``(step, loss)``. The loss is kept as the tensor, and since
the skipped batch never runs ``backward()``, its graph still holds every activation autograd saved
for it: each skip keeps a whole forward pass alive. Skips come at random steps (about one in seven),
not on a schedule: memory is flat most steps and steps up by one batch's activations at each skip.

Real case: hulianyuyy/Temporal-Lift-Pooling https://github.com/hulianyuyy/Temporal-Lift-Pooling/issues/5
(a training loop that skips the backward on a bad loss runs out of memory "because double batch data
is squeezed in one forward": the skipped loss's graph is still alive) and the PyTorch FAQ
https://pytorch.org/docs/stable/notes/faq.html ("Don't accumulate history across your training loop").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "skipped_losses", "top": 1}
SPIKE = 3.0


def run(tracker_factory, steps=60):
    g = seed(5703)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    running = None
    skipped_losses = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            if step >= 4 and torch.rand((), generator=g).item() < 0.15:
                x = x * 50.0  # a corrupt batch (bad normalization upstream)
            loss = nn.functional.cross_entropy(model(x), y)
            value = loss.item()
            if running is not None and value > SPIKE * running:
                skipped_losses.append((step, loss))  # the leak: (step, value) would do
                tracker.step()
                continue
            opt.zero_grad()
            loss.backward()
            opt.step()
            running = value if running is None else 0.9 * running + 0.1 * value
            tracker.step()
