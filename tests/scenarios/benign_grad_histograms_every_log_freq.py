"""The gradient watcher as ``wandb.watch`` does it: every 30 steps each parameter's gradient is
reduced to a 64-bin histogram (``torch.histc``) and only the bin counts and range, as Python
floats, go into ``watcher.history``; the gradients themselves are dropped by the next
``zero_grad()``. Each log step allocates a model-sized burst of temporaries and keeps a few
kilobytes of floats (what a run's log is for), so memory shows the same every-30-steps cadence as a
leak but does not build up.

Real case: wandb/wandb https://github.com/wandb/wandb/issues/2644 (watch "pulls down histograms of
all gradients ... We would expect memory to increase while logging these histograms, but it should
be released immediately") and wandb/wandb https://github.com/wandb/wandb/pull/1171 (histograms
logged every 1000 steps by default).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
LOG_FREQ = 30
BINS = 64


class GradientWatcher:
    def __init__(self, model, log_freq):
        self.model = model
        self.log_freq = log_freq
        self.history = []

    def after_backward(self, step):
        if step % self.log_freq == 0:
            row = {}
            for n, p in self.model.named_parameters():
                grad = p.grad.detach().float().cpu()
                lo, hi = grad.min().item(), grad.max().item()
                row[n] = {"range": (lo, hi), "bins": torch.histc(grad, BINS, lo, hi).tolist()}
            self.history.append((step, row))


def run(tracker_factory, steps=120):
    g = seed(5712)
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
