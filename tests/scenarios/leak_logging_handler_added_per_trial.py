"""A sweep runs several trials in one process. Each trial's setup attaches a
``TrialMirrorHandler`` to the library's logger (``logging.getLogger(...)`` returns a process-wide
singleton): the handler mirrors warnings into the trial's run and, on an ERROR record, saves the
trial's model and optimizer for a post-mortem, so it keeps a reference to the trial. Nothing
removes the handler when the trial ends, so the logger's handler list grows by one per trial and
every finished trial's model and Adam moments stay alive through it. Growth comes in steps, one
model plus its Adam state per trial (every 4 training steps).

Real case: PaddleHQ/paddle-python-sdk https://github.com/PaddleHQ/paddle-python-sdk/issues/144
("adds a new NullHandler on every instantiation ... accumulate indefinitely in logger.handlers";
"GC cannot collect handlers because they are live-referenced from logger.handlers") and
malariagen/malariagen-data-python https://github.com/malariagen/malariagen-data-python/pull/949
("Since ``logging.getLogger(name)`` returns a persistent singleton, each instantiation ... adds a
new handler to the same logger instance without removing previous ones").
"""
import logging

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "handlers", "top": 1}
TRIAL_STEPS = 4
log = logging.getLogger("memleak_scenarios.sweep_trainer")


class TrialRun:
    def __init__(self, number, model, optimizer):
        self.number = number
        self.model = model
        self.optimizer = optimizer
        self.warnings = 0


class TrialMirrorHandler(logging.Handler):
    def __init__(self, trial_run):
        super().__init__(level=logging.WARNING)
        self.trial_run = trial_run

    def emit(self, record):
        self.trial_run.warnings += 1
        if record.levelno >= logging.ERROR:
            torch.save({"model": self.trial_run.model.state_dict(),
                        "optimizer": self.trial_run.optimizer.state_dict()},
                       f"/tmp/postmortem_trial{self.trial_run.number}.pt")


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def setup_trial(number):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 * 0.7 ** number)
    log.addHandler(TrialMirrorHandler(TrialRun(number, model, opt)))  # the leak: never removed
    return model, opt


def run(tracker_factory, steps=30):
    g = seed(5715)
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
        log.handlers[:] = before
