"""A dynamic-batching inference server: requests are queued with an id, a worker runs them in
batches and stores each request's output tensor in ``batcher._results`` under its id, and the
request handler pops its result when it comes back for it. A client that timed out (or
disconnected) never comes back: its result, and its bookkeeping, stay in the dict. Under load a
share of every batch times out, so ``_results`` gains their outputs every step, never cleared.
Generation runs under ``torch.inference_mode()``: no graph, only the kept outputs.

Real case: triton-inference-server/server
https://github.com/triton-inference-server/server/issues/1708 ("Memory leak in
get_async_run_results (when async call and error)": when a request returns timed-out "the two
structures in the context in charge of keeping track of all async requests is not cleaned for that
request. Generating a small memory leak").
"""
import collections

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_results", "top": 1}


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
        self._results = {}  # request id -> output, until the handler collects it

    def submit(self, rid, x):
        self._queue.append((rid, x))

    def run_once(self):
        items = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
        if not items:
            return
        with torch.inference_mode():
            out = self.model(torch.stack([x for _, x in items])).softmax(-1)
        for (rid, _), row in zip(items, out):
            self._results[rid] = row.clone()

    def collect(self, rid):
        return self._results.pop(rid, None)


def run(tracker_factory, steps=30):
    g = seed(1708)
    model = Scorer().eval()
    batcher = DynamicBatcher(model)
    served = 0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            rids = [f"{step}-{i}" for i in range(32)]
            for rid in rids:
                batcher.submit(rid, torch.randn(64, generator=g))
            batcher.run_once()
            timed_out = torch.rand(32, generator=g) < 0.4  # their clients gave up
            for rid, gone in zip(rids, timed_out.tolist()):
                if not gone:  # the leak: a timed-out request's result is never popped
                    served += int(batcher.collect(rid).argmax())
            tracker.step()
