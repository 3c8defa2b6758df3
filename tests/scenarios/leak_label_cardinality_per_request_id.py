"""An inference server records per-request latency in a Prometheus-style histogram whose labels
include the request id. Like ``prometheus_client``'s ``MetricWrapperBase``, ``labels(...)`` creates
a child metric (a count, a sum and one counter per bucket) for each new tuple of label values and
keeps it in the metric's ``_children`` dict for the process's lifetime, so that every series can be
scraped. With an id in the labels every request makes a new series: the dict gains a child per
request, never evicted. Host memory only (Python objects), tens of KiB a step.

Real case: BerriAI/litellm https://github.com/BerriAI/litellm/issues/12159 ("memory leak when
scraping Prometheus metrics (most likely due to label cardinality explosion)": metrics labelled
with ``user_id`` and ``key_id`` make "many, many thousands of separate metrics that never get
GC'ed"), and musicmonk42/The_Code_Factory_Working_V2
https://github.com/musicmonk42/The_Code_Factory_Working_V2/issues/1800 ("Prometheus metrics use
job_id as label — unbounded memory growth": "Each unique job creates a permanent time series that
is never garbage-collected").
"""
import time

import torch

from ._common import MLP, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "request_latency", "top": 1}
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _HistogramChild:
    def __init__(self, buckets):
        self.upper = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, v):
        self.sum += v
        for i, b in enumerate(self.upper):
            if v <= b:
                self.counts[i] += 1
                return
        self.counts[-1] += 1


class Histogram:
    """The parent metric: one child per tuple of label values, kept until ``remove()``."""

    def __init__(self, name, labelnames, buckets=BUCKETS):
        self.name, self.labelnames, self.buckets = name, tuple(labelnames), buckets
        self._children = {}

    def labels(self, *values):
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _HistogramChild(self.buckets)
        return child


def run(tracker_factory, steps=60):  # about 100 KiB a step
    g = seed(12159)
    model = MLP().eval()
    # the leak: `request_id` among the labels, so a new child series per request
    request_latency = Histogram("request_latency_seconds", ("route", "model", "request_id"))
    with tracker_factory(model) as tracker:
        for step in range(steps):
            for r in range(128):  # a batch of requests a step
                x = torch.randn(4, 32, generator=g)
                t0 = time.perf_counter()
                with torch.inference_mode():
                    model(x).argmax(-1)
                rid = f"req-{step:05d}-{r:03d}-{int(torch.randint(0, 1 << 30, (1,), generator=g))}"
                request_latency.labels("/v1/classify", "mlp-v3", rid).observe(time.perf_counter() - t0)
            tracker.step()
