"""A feature store fed by a forward hook on a block that runs under reentrant activation
checkpointing (``checkpoint(block, h, use_reentrant=True)``). The author stores the block's output
as it is, reasoning that the checkpointed block runs under ``torch.no_grad()`` so nothing of a
graph can be kept. But the output the hook sees in the forward is the one the checkpoint Function
hands back, with ``CheckpointFunctionBackward`` as its ``grad_fn`` (reaching the layers before the
block and the step's input, a leaf that requires grad), and in backward the checkpoint re-runs the
block with grad enabled, so the hook fires a second time on the recomputed output, which has a
graph of its own. The list is never trimmed: two outputs a step, each the head of a graph that
keeps what it reaches alive.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/81296 ("Gradient hook is
called twice for shared parameter with activation checkpointing": hooks fire again during the
recomputation) and pytorch/pytorch https://github.com/pytorch/pytorch/issues/84413 (reentrant
checkpoint keeps what its ``run_function`` references), with a hook that keeps every output it
sees as in https://github.com/jacobgil/pytorch-grad-cam/issues/71.
"""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "features", "top": 1}


class Net(nn.Module):
    def __init__(self, d=128):
        super().__init__()
        self.inp = nn.Linear(DIM, d)
        self.block = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = checkpoint(self.block, h, use_reentrant=True)
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(5808)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    features = []
    handle = model.block.register_forward_hook(lambda m, i, out: features.append(out))  # the leak
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=64)
                x.requires_grad_(True)  # reentrant checkpoint needs an input that requires grad
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        handle.remove()
