"""The training script keeps its session log in memory for crash reports: a
``logging.StreamHandler`` writes to an ``io.StringIO`` (``session_log``) attached to the trainer's
logger, and each step logs the batch's per-sample predictions and losses as text. ``StreamHandler``
calls ``flush()`` after every record, but ``StringIO.flush()`` does nothing: the buffer holds every
line ever logged. The growth is one Python string buffer (no tensor kept), tens of KiB a step.

Real case: jtriley/StarCluster https://github.com/jtriley/StarCluster/issues/157 (the load
balancer's memory grows because "I'm storing the session log in memory (via a StringIO log
handler) in order to conveniently build crash-reports") and hatchet-dev/hatchet
https://github.com/hatchet-dev/hatchet/issues/4587 ("worker log capture retains every log record
for the lifetime of the worker process"; "StringIO.flush() is a no-op and does not clear the
underlying buffer", fixed in https://github.com/hatchet-dev/hatchet/pull/4588).
"""
import io
import logging

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "session_log", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(614)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = logging.getLogger("memleak_scenarios.stringio_crash_report")
    log.setLevel(logging.INFO)
    log.propagate = False
    session_log = io.StringIO()
    handler = logging.StreamHandler(session_log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=256)
                logits = model(x)
                per_sample = nn.functional.cross_entropy(logits, y, reduction="none")
                loss = per_sample.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                preds = logits.detach().argmax(1).tolist()
                losses = per_sample.detach().tolist()
                log.info("step %d loss %.5f", step, loss.item())
                for i, (p, l) in enumerate(zip(preds, losses)):
                    log.info("step %d sample %d pred %d loss %.6f", step, i, p, l)
                tracker.step()
    finally:
        log.removeHandler(handler)
