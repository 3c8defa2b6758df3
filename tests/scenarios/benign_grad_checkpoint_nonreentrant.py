"""Activation checkpointing with the non-reentrant implementation: each block's forward is run
under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, which saves only the block's
inputs (through saved-tensor hooks) and recomputes the activations during backward. The
recomputed tensors are freed as backward proceeds; memory is flat from step to step.

Real case: https://docs.pytorch.org/docs/stable/checkpoint (``use_reentrant=False`` is the
recommended variant; "It is recommended that you use use_reentrant=False", as the warning in
training logs says). Here a three-block residual MLP with every block checkpointed and dropout
(so the RNG state is stashed per block).
"""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * d, d))

    def forward(self, h):
        return h + self.net(h)


class CheckpointedNet(nn.Module):
    def __init__(self, d=64, depth=3):
        super().__init__()
        self.inp = nn.Linear(DIM, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(65)
    model = CheckpointedNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=32)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
