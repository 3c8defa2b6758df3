"""A sweep runs several trials in one process. Each trial's setup attaches a
``TrialMirrorHandler`` (which keeps the trial's model and optimizer, to save them on an ERROR
record) to the library's process-wide logger, but first removes and closes the handlers a previous
trial attached, so the logger never holds more than the current trial's handler. Each trial builds
a new model and Adam state, which looks like growth per trial, but the previous trial's handler,
and with it its model, is dropped.

Real case: the fix in malariagen/malariagen-data-python
https://github.com/malariagen/malariagen-data-python/pull/949 ("Before adding a new handler,
existing handlers on the logger are removed and closed ... Ensures the logger remains idempotent
across instantiations"), for the accumulation reported in PaddleHQ/paddle-python-sdk
https://github.com/PaddleHQ/paddle-python-sdk/issues/144.
"""
import logging

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
TRIAL_STEPS = 4
log = logging.getLogger("memleak_scenarios.sweep_trainer_fixed")


class TrialMirrorHandler(logging.Handler):
    def __init__(self, number, model, optimizer):
        super().__init__(level=logging.WARNING)
        self.number, self.model, self.optimizer = number, model, optimizer

    def emit(self, record):
        if record.levelno >= logging.ERROR:
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
                       f"/tmp/postmortem_trial{self.number}.pt")


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def setup_trial(number):
    for old in [h for h in log.handlers if isinstance(h, TrialMirrorHandler)]:
        log.removeHandler(old)
        old.close()
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 * 0.7 ** number)
    log.addHandler(TrialMirrorHandler(number, model, opt))
    return model, opt


def run(tracker_factory, steps=30):
    g = seed(5716)
    log.setLevel(logging.INFO)
    log.propagate = False
    before = list(log.handlers)
    model, opt = setup_trial(0)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                if step and step % TRIAL_STEPS == 0:
                    model, opt = setup_trial(step // TRIAL_STEPS)
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if loss.item() > 10:
                    log.warning("trial step %d: loss %.3f", step, loss.item())
                tracker.step()
    finally:
        for h in log.handlers:
            if h not in before:
                h.close()
        log.handlers[:] = before
