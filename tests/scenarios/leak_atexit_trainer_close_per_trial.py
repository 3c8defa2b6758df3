"""A sweep builds one ``Trainer`` per trial in the same process. The trainer's constructor
registers its own ``close`` with ``atexit`` (so loggers are flushed and checkpoints finalized if
the process exits mid-run), and nothing unregisters it when the trial ends. ``atexit`` holds the
bound method, the bound method holds the trainer, and the trainer its model and optimizer: every
finished trial's weights and Adam moments stay alive until the interpreter exits. Growth comes in
steps, one model plus its Adam state per trial (every 4 training steps).

Real case: mosaicml/composer https://github.com/mosaicml/composer/pull/1769 ("unregister":
"Fixes memory not being freed with object deletion. Experiment training resnet twice in same
python process"; the trainer's atexit registration is unregistered on close) and
DataDog/dd-trace-py https://github.com/DataDog/dd-trace-py/pull/2409 ("The Tracer would never
unregister its shutdown function ... you would have a million tracers kept around to be shutdown
at exit time").
"""
import atexit
import weakref

import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "atexit", "top": 1}
TRIAL_STEPS = 4


class Trainer:
    def __init__(self, lr):
        self.model = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.closed = False
        atexit.register(self.close)  # the leak: never unregistered when the trial ends

    def close(self):
        self.closed = True

    def train_step(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def run(tracker_factory, steps=30):
    g = seed(5719)
    made = []  # weak references, to unregister at the end without keeping the trainers
    trainer = Trainer(lr=1e-3)
    made.append(weakref.WeakMethod(trainer.close))
    try:
        with tracker_factory(trainer.model, optimizer=trainer.optimizer) as tracker:
            for step in range(steps):
                if step and step % TRIAL_STEPS == 0:  # next trial
                    trainer.close()
                    trainer = Trainer(lr=1e-3 * 0.7 ** (step // TRIAL_STEPS))
                    made.append(weakref.WeakMethod(trainer.close))
                x, y = batch(g, n=64)
                trainer.train_step(x, y)
                tracker.step()
    finally:
        for ref in made:
            fn = ref()
            if fn is not None:
                atexit.unregister(fn)
