"""The OOM recovery done as PyTorch's maintainers advise: when a large batch runs out of memory in
the forward pass, the ``except`` block only notes it (a message string in a bounded
``deque(maxlen=100)``, no exception or traceback kept) and sets a flag; the retry runs *outside* the
``except`` block, once the exception and its frames are gone, as two half batches with gradient
accumulation. OOMs come at random steps (about one in six), so the steps that retry allocate twice
and the heap moves irregularly, but nothing from a failed attempt survives it.

Real case: https://github.com/pytorch/pytorch/issues/18853 ("Do not bring the exception object into
scope, or do error recovery outside of the catch block") and
https://github.com/pytorch/pytorch/issues/27600 (the exception "holds on to the frame where the
error was raised").
"""
from collections import deque

import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
MAX_ROWS = 256


class BudgetMLP(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(DIM, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        if x.shape[0] > MAX_ROWS:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.head(h)


def run(tracker_factory, steps=60):
    g = seed(5710)
    model = BudgetMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    oom_notes = deque(maxlen=100)
    sizes = [64, 96, 128, 192, 384]
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            r = torch.rand((), generator=g).item()
            n = sizes[-1] if (step >= 3 and r < 0.17) else sizes[int(r * 4) % 4]
            x = torch.randn(n, DIM, generator=g)
            y = torch.randint(0, 4, (n,), generator=g)
            oom = False
            try:
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            except RuntimeError as e:
                if "out of memory" not in str(e):
                    raise
                oom_notes.append(f"step {step}: OOM on batch {n}, retrying in halves")
                oom = True
            if oom:  # recovery outside the except block: the traceback is gone
                opt.zero_grad()
                for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True):
                    (nn.functional.cross_entropy(model(xs), ys) / 2).backward()
                opt.step()
            tracker.step()
