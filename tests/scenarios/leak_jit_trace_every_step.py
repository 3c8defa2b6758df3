"""The model is traced with ``torch.jit.trace`` on every step (to export it, or to get a traced
copy for a new input shape) and the traced module is dropped a step later: TorchScript compiles
each module's ``forward`` into its global compilation unit and never takes it out, so host memory
grows by the traced graphs every step although no variable keeps them.

Real case: https://github.com/pytorch/pytorch/issues/35600 ("Increased memory usage in repetitive
torch.jit.trace calls": rss up ~40 MB a trace of resnet18) and
https://github.com/pytorch/pytorch/issues/58109 ("torch.jit.trace memory leak": ``m =
torch.jit.trace(net, tensor); del m`` in a loop, memory keeps rising).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "torch.jit.trace(MLP.forward)", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(93)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                exported = torch.jit.trace(model, x, check_trace=False)  # the leak: a new trace each step
            exported(x)
            tracker.step()
