"""A dynamic-batching inference server whose result table forgets abandoned requests: each
request's output tensor is stored in ``batcher._results`` with the request's deadline, the handler
pops its result when it comes back for it, and every batch first drops results whose deadline has
passed (their clients timed out and will not come back). Results of abandoned requests therefore
live for a few batches and go: the table holds a bounded number of outputs (those within their
deadline), though tensors stay in it from one step to the next.

Real case: the workaround in triton-inference-server/server
https://github.com/triton-inference-server/server/issues/1708 (on a timed-out async request,
remove its entries from the context's tracking structures under the lock), and the bounded
per-request handling of https://github.com/maemreyo/omnivoice-server/pull/6 (each request awaits
its own result; a semaphore caps what is in flight).
"""
import collections

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
DEADLINE = 4  # batches a result waits for its handler


class Scorer(nn.Module):
    def __init__(self, d=64, out=256):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 128), nn.GELU(), nn.Linear(128, out))

    def forward(self, x):
        return self.body(x)


class DynamicBatcher:
    def __init__(self, model, max_batch=32):
        self.model, self.max_batch = model, max_batch
        self._queue = collections.deque()
        self._results = {}  # request id -> (deadline, output)
        self._tick = 0

    def submit(self, rid, x):
        self._queue.append((rid, x))

    def run_once(self):
        self._tick += 1
        for rid in [r for r, (d, _) in self._results.items() if d < self._tick]:
            del self._results[rid]  # its client gave up: nobody will collect it
        items = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
        if not items:
            return
        with torch.inference_mode():
            out = self.model(torch.stack([x for _, x in items])).softmax(-1)
        for (rid, _), row in zip(items, out):
            self._results[rid] = (self._tick + DEADLINE, row.clone())

    def collect(self, rid):
        hit = self._results.pop(rid, None)
        return None if hit is None else hit[1]


def run(tracker_factory, steps=30):
    g = seed(1709)
    model = Scorer().eval()
    batcher = DynamicBatcher(model)
    served = 0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            rids = [f"{step}-{i}" for i in range(32)]
            for rid in rids:
                batcher.submit(rid, torch.randn(64, generator=g))
            batcher.run_once()
            timed_out = torch.rand(32, generator=g) < 0.4
            for rid, gone in zip(rids, timed_out.tolist()):
                if not gone:
                    served += int(batcher.collect(rid).argmax())
            tracker.step()
