"""A homemade TensorBoard-like writer that buffers histogram events until ``flush()``, which is never called.

Real case: https://github.com/lanpa/tensorboardX/issues/116 ("Summaries don't flush to disk": memory
climbs steadily while summaries pile up unflushed) and
https://github.com/victoresque/pytorch-template/issues/96 (``add_histogram`` of every parameter each
epoch exhausting RAM). ``EventWriter.add_histogram`` keeps a detached copy of each weight in
``self._pending`` to compute the histograms at flush time; the training script never flushes.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_pending", "top": 1}


class EventWriter:
    def __init__(self, logdir, max_queue=10_000):
        self.logdir = logdir
        self.max_queue = max_queue
        self._pending = []

    def add_scalar(self, tag, value, step):
        self._pending.append(("scalar", tag, float(value), step))

    def add_histogram(self, tag, values, step):
        self._pending.append(("histogram", tag, values.detach().clone(), step))  # the leak
        if len(self._pending) > self.max_queue:
            self.flush()

    def flush(self):
        self._pending.clear()


def run(tracker_factory, steps=30):
    g = seed(115)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    writer = EventWriter("runs/exp1")
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            writer.add_scalar("loss", loss.item(), step)
            for name, p in model.named_parameters():
                writer.add_histogram(f"weights/{name}", p, step)
            tracker.step()
