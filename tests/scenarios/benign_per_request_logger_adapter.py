"""The bounded form of ``leak_per_request_child_loggers``: the same inference server tags each
request's log lines with its id, but through a ``logging.LoggerAdapter`` around one shared logger
(``extra={"request_id": rid}``) instead of a new registered logger per request. Adapters are not
registered anywhere and die with the request: nothing accumulates.

Real case: the fix for tarasko/picows https://github.com/tarasko/picows/issues/72 (per-connection
loggers from ``getChild`` were never collected; "Fix: Create it using logging.Logger", not
registered) and foundit/Piped https://github.com/foundit/Piped/pull/32 ("Do not waste memory on
making e.g. one logger per HTTP-request").
"""
import logging

import torch

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(917)
    model = MLP().eval()
    base = logging.getLogger("memleak_scenarios.serve_adapter")
    base.setLevel(logging.INFO)
    base.propagate = False
    rid = 0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            x = torch.randn(64, 32, generator=g)
            with torch.inference_mode():
                probs = model(x).softmax(-1)
            for row in probs.tolist():
                rid += 1
                req_log = logging.LoggerAdapter(base, {"request_id": rid})
                req_log.debug("top class %d p=%.3f", max(range(len(row)), key=row.__getitem__), max(row))
            tracker.step()
