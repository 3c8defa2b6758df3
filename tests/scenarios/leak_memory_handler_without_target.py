"""An inference service buffers its per-request log records in a ``logging.handlers.MemoryHandler``
(``request_log_buffer``) so that a crash report can replay the recent requests; the handler's
``target`` is to be set "when a crash-report sink is configured", and in this deployment it never
is. ``MemoryHandler.shouldFlush()`` turns true once ``capacity`` records are buffered, but
``flush()`` only empties the buffer when there is a target to hand the records to: with
``target=None`` the buffer keeps every ``LogRecord`` (message, args, the request text) for as long
as the process runs. The growth is Python objects only (no tensor kept), about 110 KiB a step.

Real case: Tribler/tribler https://github.com/Tribler/tribler/pull/8530 ("Fixes a memory leak in
the logging endpoint due to the ``MemoryHandler`` flushing mechanism"; the fix caps the buffer at
400 records that rotate out), for the memory growth reported in
https://github.com/Tribler/tribler/issues/8485.
"""
import logging
import logging.handlers

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "request_log_buffer", "top": 1}
VOCAB = 4096
REQUESTS = 96  # a batch of requests a step, each logged: about 1.1 KiB a record with its text


class Classifier(nn.Module):
    def __init__(self, vocab=VOCAB, d=64):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, d)
        self.head = nn.Linear(d, 8)

    def forward(self, ids, offsets):
        return self.head(self.embed(ids, offsets))


def run(tracker_factory, steps=30):
    g = seed(8530)
    model = Classifier().eval()
    log = logging.getLogger("memleak_scenarios.memory_handler_without_target")
    log.setLevel(logging.INFO)
    log.propagate = False
    # the leak: target=None, so flush() at capacity hands nothing on and clears nothing
    request_log_buffer = logging.handlers.MemoryHandler(capacity=256, flushLevel=logging.CRITICAL)
    log.addHandler(request_log_buffer)
    try:
        with tracker_factory(model) as tracker:
            for step in range(steps):
                ids = torch.randint(0, VOCAB, (REQUESTS, 24), generator=g)
                offsets = torch.arange(0, REQUESTS * 24, 24)
                with torch.inference_mode():
                    labels = model(ids.flatten(), offsets).argmax(-1).tolist()
                for r, (row, label) in enumerate(zip(ids.tolist(), labels)):
                    text = " ".join(f"w{t}" for t in row)
                    log.info("req %d-%d label=%d text=%s", step, r, label, text)
                tracker.step()
    finally:
        log.removeHandler(request_log_buffer)
        request_log_buffer.close()
