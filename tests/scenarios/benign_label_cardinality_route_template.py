"""An inference server records per-request latency in a Prometheus-style histogram labelled by the
route template and the status code, not by the raw path or the request id. ``labels(...)`` creates
a child series (a count, a sum and one counter per bucket) the first time it sees a tuple of label
values: the dict of children grows over the first steps, while new routes and status codes turn
up, then stops, bounded by routes x statuses, however many requests are served.

Real case: the fix suggested in mozilla-ai/otari https://github.com/mozilla-ai/otari/issues/264
("unbounded Prometheus label cardinality from raw request paths": "Label with the matched route
template instead of the raw path ... Path parameters then collapse into one series per route"), and
authup/authup https://github.com/authup/authup/issues/3253 (normalize ``/users/<uuid>`` to
``/users/:id``).
"""
import time

import torch

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ROUTES = ("/v1/models/{model}/classify", "/v1/models/{model}/embed", "/v1/users/{user}/history",
          "/v1/files/{file}", "/v1/batches/{batch}", "/health")
STATUSES = ("200", "400", "404", "422", "429", "500", "503")
MODELS = ("mlp-v1", "mlp-v2", "mlp-v3", "mlp-v4")


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
    def __init__(self, name, labelnames, buckets=BUCKETS):
        self.name, self.labelnames, self.buckets = name, tuple(labelnames), buckets
        self._children = {}

    def labels(self, *values):
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _HistogramChild(self.buckets)
        return child


def run(tracker_factory, steps=60):
    g = seed(12160)
    model = MLP().eval()
    request_latency = Histogram("request_latency_seconds", ("route", "model", "status"))
    with tracker_factory(model) as tracker:
        for step in range(steps):
            for r in range(128):  # a batch of requests a step
                x = torch.randn(4, 32, generator=g)
                t0 = time.perf_counter()
                with torch.inference_mode():
                    model(x).argmax(-1)
                route = ROUTES[int(torch.randint(0, len(ROUTES), (1,), generator=g))]
                # rarer statuses show up later: the set of series fills over the first steps
                status = STATUSES[min(int(torch.empty(1).exponential_(1.2, generator=g)), len(STATUSES) - 1)]
                mdl = MODELS[int(torch.randint(0, len(MODELS), (1,), generator=g))]
                request_latency.labels(route, mdl, status).observe(time.perf_counter() - t0)
            tracker.step()
