"""An inference service buffers its per-request log records in a ``logging.handlers.MemoryHandler``
whose ``target`` is a ``FileHandler``: once ``capacity`` records are buffered, ``flush()`` writes them
to the file and clears the buffer. Memory climbs for several steps (hundreds of ``LogRecord``
objects with their request text), then falls back to nothing, again and again: a sawtooth bounded by
the capacity, not a leak, however long the service runs.

Real case: the bounded buffer of Tribler/tribler https://github.com/Tribler/tribler/pull/8530 (the
logging endpoint's ``MemoryHandler`` capped at 400 records that rotate out, after the growth of
https://github.com/Tribler/tribler/issues/8485), and the buffered handler of
https://github.com/akeneo/pim-community-dev/pull/13226 (a buffer with a size limit flushed on
demand instead of an unlimited one).
"""
import logging
import logging.handlers
import os
import tempfile

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VOCAB = 4096


class Classifier(nn.Module):
    def __init__(self, vocab=VOCAB, d=64):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, d)
        self.head = nn.Linear(d, 8)

    def forward(self, ids, offsets):
        return self.head(self.embed(ids, offsets))


def run(tracker_factory, steps=30):
    g = seed(8531)
    model = Classifier().eval()
    log = logging.getLogger("memleak_scenarios.memory_handler_flushes_to_file")
    log.setLevel(logging.INFO)
    log.propagate = False
    fd, path = tempfile.mkstemp(suffix=".log")
    os.close(fd)
    sink = logging.FileHandler(path, delay=True)
    request_log_buffer = logging.handlers.MemoryHandler(
        capacity=384, flushLevel=logging.CRITICAL, target=sink)
    log.addHandler(request_log_buffer)
    try:
        with tracker_factory(model) as tracker:
            for step in range(steps):
                ids = torch.randint(0, VOCAB, (96, 24), generator=g)
                offsets = torch.arange(0, 96 * 24, 24)
                with torch.inference_mode():
                    labels = model(ids.flatten(), offsets).argmax(-1).tolist()
                for r, (row, label) in enumerate(zip(ids.tolist(), labels)):
                    text = " ".join(f"w{t}" for t in row)
                    log.info("req %d-%d label=%d text=%s", step, r, label, text)
                tracker.step()
    finally:
        log.removeHandler(request_log_buffer)
        request_log_buffer.close()
        sink.close()
        os.unlink(path)
