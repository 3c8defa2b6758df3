"""A home-grown ``watch(model, log="gradients", log_freq=30)``: every 30 steps a ``GradientWatcher``
records each parameter's gradient for a gradient-flow plot drawn after training, keeping
``{name: p.grad}`` in ``watcher.grad_snapshots``. ``optimizer.zero_grad()`` sets gradients to
``None`` (the default since PyTorch 2.0), so each backward makes fresh gradient tensors and the
recorded ones are never overwritten: every log step keeps one model-sized set of gradients (about
1.1 MiB here). Between log steps nothing changes; over a 120-step run memory steps up four times
(steps 0, 30, 60 and 90).

Real case: wandb/wandb https://github.com/wandb/wandb/issues/2644 ("System memory is stable during
training, but large 1GB chunks are utilized shortly after taking checkpoints. When I comment out
``wandb.watch(model)``, the issue goes away"; the maintainer: watch "pulls down histograms of all
gradients ... We would expect memory to increase while logging these histograms, but it should be
released immediately"), and wandb/wandb https://github.com/wandb/wandb/pull/1171 (gradient logging
made every 1000 steps by default because the histograms are heavy).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "grad_snapshots", "top": 1}
LOG_FREQ = 30


class GradientWatcher:
    def __init__(self, model, log_freq):
        self.model = model
        self.log_freq = log_freq
        self.grad_snapshots = []

    def after_backward(self, step):
        if step % self.log_freq == 0:
            # the leak: keep histograms (torch.histc(...).tolist()), not the gradients themselves
            self.grad_snapshots.append((step, {n: p.grad for n, p in self.model.named_parameters()}))


def run(tracker_factory, steps=120):
    g = seed(5711)
    model = MLP(hidden=512)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    watcher = GradientWatcher(model, LOG_FREQ)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            watcher.after_backward(step)
            opt.step()
            tracker.step()
