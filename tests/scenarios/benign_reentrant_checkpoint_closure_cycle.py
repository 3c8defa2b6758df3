"""A block run under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`` whose
function is a closure over the step's ``aux`` dict (deep-supervision outputs), and the block's
output is then put in that same dict: ``aux -> output -> output.grad_fn (the checkpoint's ctx)
-> ctx.run_function -> aux``. Every step makes one such reference cycle, so the outputs are not
freed when the step ends and memory climbs for a few dozen steps -- but the cycle runs through
Python objects only (the ctx is a Python object the collector traverses), and the garbage
collector's automatic runs reclaim it: memory is a sawtooth with a fixed ceiling, not a leak.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/84413 ("reentrant
checkpoint cause cyclic reference if run_fn capture object that reference output": the repro's
``max_memory_allocated`` climbs, and "with gc.collect is ok - not real memory leak, only a cyclic
reference").
"""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class DeepSupervisedNet(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.inp = nn.Linear(DIM, d)
        self.block = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
        self.aux_head = nn.Linear(d, 4)
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        aux = {"x": x}
        h = self.inp(x)

        def run_block(t):
            aux["scale"] = aux["x"].shape[0]  # the closure reads (and so keeps) the step's aux dict
            return self.block(t)

        h = checkpoint(run_block, h, use_reentrant=True)
        aux["h"] = h  # ... and the dict keeps the checkpoint's output: a cycle through its ctx
        return self.head(torch.relu(h)), self.aux_head(h.detach()), aux


def run(tracker_factory, steps=30):
    g = seed(5805)
    model = DeepSupervisedNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=128)
            x.requires_grad_(True)
            logits, aux_logits, aux = model(x)
            loss = nn.functional.cross_entropy(logits, y) + 0.3 * nn.functional.cross_entropy(aux_logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            del logits, aux_logits, aux, loss
            tracker.step()
