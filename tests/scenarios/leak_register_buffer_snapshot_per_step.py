"""Rollback snapshots kept as module buffers: so that they follow ``model.to(...)`` and land in
``state_dict``, a stabiliser registers a copy of the hidden layer's weight with
``self.register_buffer(f"snap_{step}", w.clone())`` every step, meaning to roll back to one of them
after a loss spike, and never deletes the old ones. Each call adds a new name to
``stabiliser._buffers``: one 256x256 float copy (256 KiB) per step, and ``state_dict()`` grows too.

Real case: "Memory leak when assigning function to instance variable"
https://github.com/pytorch/pytorch/issues/128211 (memory growing across iterations with tensors
held by ``register_buffer`` on modules), and the buffer semantics documented at
https://pytorch.org/docs/stable/generated/torch.nn.parameter.Buffer.html (a registered buffer lives
as long as the module, in its list of buffers). Here the buffers are new names, one per step.
"""
import torch
from torch import nn

from ._common import batch, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "stabiliser", "top": 1}


class Stabiliser(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0

    @torch.no_grad()
    def snapshot(self, w):
        self.register_buffer(f"snap_{self.step}", w.detach().clone())  # the leak: a new name each step
        self.step += 1


class Net(nn.Module):
    def __init__(self, d_in=32, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 4)
        self.stabiliser = Stabiliser()

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def run(tracker_factory, steps=30):
    g = seed(316)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.stabiliser.snapshot(model.fc2.weight)
            tracker.step()
