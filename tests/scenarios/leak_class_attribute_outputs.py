"""A block that saves its output, graph and all, in a list defined at class level
(``class Bottleneck(nn.Module): out_saved = [0] * N``) to replay it later; a class attribute is
shared by every instance and lives as long as the class, so the saved outputs of every block and
every batch stay alive, with the autograd graph of each.

Real case: https://discuss.pytorch.org/t/cuda-out-of-memory-error-understanding-how-pytorch-stores-class-variable/13778
("trying to save intermediate output to a class variable": ``Bottleneck.out_saved[self.counter] =
out`` in a DenseNet, which ran out of GPU memory); the slots are pre-filled with ``0`` and
replaced by tensors one batch at a time, so the list's length never changes.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "out_saved", "top": 1}


class Bottleneck(nn.Module):
    out_saved = [0] * 900  # the leak: shared by all blocks, filled with outputs that keep their graphs

    def __init__(self, d, index):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.index = index
        self.counter = 0

    def forward(self, x):
        out = x + torch.relu(self.fc(x))
        Bottleneck.out_saved[(self.counter * 2 + self.index) % len(Bottleneck.out_saved)] = out
        self.counter += 1
        return out


class Net(nn.Module):
    def __init__(self, d=DIM, hidden=256):
        super().__init__()
        self.inp = nn.Linear(d, hidden)
        self.blocks = nn.Sequential(Bottleneck(hidden, 0), Bottleneck(hidden, 1))
        self.head = nn.Linear(hidden, 4)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


def run(tracker_factory, steps=30):
    g = seed(61)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
