"""Tensors logged with the lazy ``%s`` idiom to a ``logging.handlers.MemoryHandler`` that never
flushes: each buffered ``LogRecord`` keeps its ``args``, and so a tensor of every step.

Real case: Tribler https://github.com/Tribler/tribler/pull/8530 ("Fixes a memory leak in the
logging endpoint due to the ``MemoryHandler`` flushing mechanism"; fixed by a capacity so records
rotate out) and kivy https://github.com/kivy/kivy/issues/886 ("Memory leak in kivy.logger's
FileHandler.history": the handler's history "just keeps growing and holding LogRecord objects").
Here a training script follows the logging advice to pass values as arguments
(``log.info("step %d logits %s", step, logits)``) and buffers records for a crash report with a
capacity it never reaches and no target to flush to: every record keeps that step's logits.
"""
import logging
import logging.handlers

import torch
from torch import nn

from ._common import MLP, batch, seed

# the handler that buffers the records holds them (the walk goes into logging's loggers, handlers
# and records; before it did, gc referrers named the records' attribute, `LogRecord.args`)
EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "crash_buffer.buffer", "top": 1}

log = logging.getLogger("memleak_scenario.train")


def run(tracker_factory, steps=30):
    g = seed(41)
    model = MLP(hidden=128, d_out=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # kept for a post-mortem dump; flushes at ERROR only, and has no target
    crash_buffer = logging.handlers.MemoryHandler(capacity=100_000, flushLevel=logging.ERROR)
    log.addHandler(crash_buffer)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=128, classes=16)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                log.info("step %d loss %.4f logits %s", step, loss.item(), logits)  # the leak
                tracker.step()
    finally:
        log.removeHandler(crash_buffer)
        crash_buffer.buffer.clear()
