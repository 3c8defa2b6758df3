"""A trainer that survives CUDA out-of-memory errors: batches come in varying sizes, and when a
large one runs out of memory in the forward pass the loop catches the ``RuntimeError``, logs
``"OOM ... skipping batch"`` with ``exc_info=True`` and goes on, as the common skip-the-batch
recipe does. The trainer's logger also feeds an in-memory ``CrashReportHandler``
(``crash_report.records``) that keeps every ``LogRecord`` for a crash dump. A record logged with
``exc_info`` keeps the exception and its traceback, and the traceback keeps the frames the error
went through: the model's ``forward`` with its hidden activations and their autograd graph. OOMs
come at random steps (about one in six here, simulated by a row budget): each one keeps a large
batch's forward pass alive, for as long as the handler lives.

Real case: https://github.com/pytorch/pytorch/issues/18853 ("Make sure that you are not holding
on to tensors via an exception object (which contains the stack trace and will retain tensors)"),
https://github.com/pytorch/pytorch/issues/27600 ("the python error holds onto all the local
variables of the stack trace. And so as long as you hold onto the exception, the memory cannot be
freed") and NVIDIA/MinkowskiEngine https://github.com/NVIDIA/MinkowskiEngine/issues/359 ("CUDA OOM
error leads to GPU memory leak", a loop logging "CUDA OOM Error during batch execution, skipping
batch" with the traceback).
"""
import logging

import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "records", "top": 1}
MAX_ROWS = 256  # stands in for the device's memory: a larger batch "runs out" mid-forward


class CrashReportHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)  # the leak: each record's exc_info keeps its traceback


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
    g = seed(5709)
    model = BudgetMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    log = logging.getLogger("memleak_scenarios.oom_exc_info")
    log.setLevel(logging.INFO)
    log.propagate = False
    crash_report = CrashReportHandler()
    log.addHandler(crash_report)
    sizes = [64, 96, 128, 192, 384]
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                r = torch.rand((), generator=g).item()
                n = sizes[-1] if (step >= 3 and r < 0.17) else sizes[int(r * 4) % 4]
                x = torch.randn(n, DIM, generator=g)
                y = torch.randint(0, 4, (n,), generator=g)
                try:
                    loss = nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                except RuntimeError as e:
                    if "out of memory" not in str(e):
                        raise
                    log.warning("OOM at step %d (batch %d), skipping batch", step, n, exc_info=True)
                    opt.zero_grad()
                tracker.step()
    finally:
        log.removeHandler(crash_report)
