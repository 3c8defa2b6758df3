"""A saliency monitor: every step the input batch is made a leaf that requires grad and gets a
``register_hook`` that stores the input gradient's per-sample magnitude in
``monitor.latest`` (overwritten each step). The hook lives on the step's fresh input tensor, not
on a parameter, so it is freed with that tensor; only one small saliency tensor is alive at a
time. Memory is flat.

Real case: zennit https://github.com/chr5tphr/zennit/issues/11 ("Memory Leak": hooks keeping
tensor references across repeated attribution runs, fixed in
https://github.com/chr5tphr/zennit/pull/13); this is the safe variant, a tensor hook on a
per-step leaf whose closure holds nothing that outlives the step.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class SaliencyMonitor:
    def __init__(self):
        self.latest = None

    def watch(self, x):
        def hook(grad):
            self.latest = grad.detach().abs().sum(1)
        x.register_hook(hook)


def run(tracker_factory, steps=30):
    g = seed(120)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = SaliencyMonitor()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=128)
            x.requires_grad_(True)
            monitor.watch(x)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
