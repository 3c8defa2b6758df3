"""A growing network: every 8 steps a new hidden block is inserted before the head and its
parameters are added to the optimizer with ``add_param_group`` (Adam keeps the older groups'
state), up to ``MAX_BLOCKS = 3`` growths. Memory steps up at each growth (the block, its gradients
and its Adam moments, about 1 MiB), so a 30-step run shows a three-stair staircase, but the growth
is the model the user asked for and it stops at the cap.

Real case: NVIDIA/apex https://github.com/NVIDIA/apex/issues/292 ("I am currently training a
growing model that requires me to add new param groups to the optimizer at each growth. That is, I
train the model for X iterations, then add a new layer. This is repeated around 5-10 times.
Preferably I keep the state of the optimizer for the older param groups") and
https://github.com/pytorch/pytorch/pull/2374 ("Allow param groups to be added to Optimizer
dynamically").
"""
import torch
from torch import nn

from ._common import batch, seed, DIM

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
GROW_EVERY = 8
MAX_BLOCKS = 3
HIDDEN = 256


class GrowingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(DIM, HIDDEN)
        self.blocks = nn.ModuleList()
        self.head = nn.Linear(HIDDEN, 4)

    def grow(self):
        block = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.blocks.append(block)
        return block

    def forward(self, x):
        h = torch.relu(self.stem(x))
        for b in self.blocks:
            h = h + b(h)
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(173)
    model = GrowingNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step and step % GROW_EVERY == 0 and len(model.blocks) < MAX_BLOCKS:
                block = model.grow()
                opt.add_param_group({"params": list(block.parameters()), "lr": 1e-3})
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
