"""The bounded form of ``leak_stringio_crash_report_log``: the same in-memory ``StringIO`` session
log written by a ``logging.StreamHandler``, but at the end of every step the buffer is shipped
(here: its text is handed to a sink that keeps only its length) and emptied with ``seek(0)`` /
``truncate(0)``. Only one step's lines are ever in memory.

Real case: the fix direction of hatchet-dev/hatchet https://github.com/hatchet-dev/hatchet/issues/4587
(log capture kept every record in a ``StringIO`` that was never drained; fixed in
https://github.com/hatchet-dev/hatchet/pull/4588).
"""
import io
import logging

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(614)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = logging.getLogger("memleak_scenarios.stringio_drained")
    log.setLevel(logging.INFO)
    log.propagate = False
    session_log = io.StringIO()
    handler = logging.StreamHandler(session_log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    shipped_chars = 0
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
                shipped_chars += len(session_log.getvalue())  # shipped to the log service
                session_log.seek(0)
                session_log.truncate(0)
                tracker.step()
    finally:
        log.removeHandler(handler)
