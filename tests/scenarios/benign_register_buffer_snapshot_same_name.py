"""Twin of ``leak_register_buffer_snapshot_per_step``: the rollback snapshot of the hidden layer's
weight is re-registered every step, but always under the same name, ``last_good``, so
``register_buffer`` replaces the previous tensor in ``stabiliser._buffers`` and only one 256 KiB
copy is alive at any time (the one a loss spike would roll back to).

Real case: https://pytorch.org/docs/stable/generated/torch.nn.parameter.Buffer.html (buffers are
module state kept as long as the module), and the register_buffer report
https://github.com/pytorch/pytorch/issues/128211; here the buffer is overwritten, not added.
"""
import torch
from torch import nn

from ._common import batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Stabiliser(nn.Module):
    @torch.no_grad()
    def snapshot(self, w):
        self.register_buffer("last_good", w.detach().clone())  # same name: replaces the old one


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
    g = seed(317)
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
