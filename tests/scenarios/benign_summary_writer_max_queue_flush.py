"""A TensorBoard-style writer that queues events and writes them out once more than ``max_queue``
(10, the default of TensorFlow's and torch's summary writers) are pending. Every step it is given
an image of the first layer's activations (a numpy copy) and a weight histogram: the queue grows
for ten steps, is flushed at the eleventh, and starts again. A sawtooth with a ten-step period
(drops at steps 10 and 21 of a 30-step run), bounded by ``max_queue``, not a leak.

Real case: the summary writer's documented queue, https://www.tensorflow.org/api_docs/python/tf/summary/create_file_writer
("max_queue: the largest number of summaries to keep in a queue; will flush once the queue gets
bigger than this. Defaults to 10").
"""
import io

import numpy as np
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class QueuedWriter:
    def __init__(self, max_queue=10):
        self.max_queue = max_queue
        self._queue = []
        self._file = io.BytesIO()

    def add_image(self, tag, img, step):
        self._enqueue((tag, step, np.array(img, copy=True)))

    def add_histogram(self, tag, values, step):
        counts, edges = np.histogram(values, bins=64)
        self._enqueue((tag, step, counts, edges))

    def _enqueue(self, event):
        self._queue.append(event)
        if len(self._queue) > self.max_queue * 2:  # two events a step
            self.flush()

    def flush(self):
        for ev in self._queue:
            self._file.write(repr(ev[:2]).encode())
        self._file = io.BytesIO()  # rotated: what was written is on disk, not here
        self._queue = []


def run(tracker_factory, steps=30):
    g = seed(544)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    writer = QueuedWriter()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=256)
            h = torch.relu(model.fc1(x))
            loss = nn.functional.cross_entropy(model.head(torch.relu(model.fc2(h))), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            writer.add_image("act/fc1", h.detach().numpy(), step)
            writer.add_histogram("w/fc2", model.fc2.weight.detach().numpy(), step)
            tracker.step()
