"""A loss-spike guard warns about each outlier sample with its index and loss in the message. Under
the ``"default"`` warnings action (the action for ``UserWarning`` unless a filter says otherwise,
and what ``python -W default`` or ``warnings.simplefilter("default")`` asks for) Python shows each
warning once per location: it records the key ``(text, category, lineno)`` of every warning it has
shown in the calling module's ``__warningregistry__``. The text changes with every sample, so every
warning is new and the registry gains one entry per warning, for the life of the process. The
warnings themselves go to a ``logging`` handler (``logging.captureWarnings``), so nothing on screen
hints at the growth. No tensor is kept: the growth is Python strings and tuples, tens of KiB a step.

Real case: POSYDON-code/POSYDON https://github.com/POSYDON-code/POSYDON/issues/364 ("python's
``warnings`` module ... adds an entry to the warnings registry (a dictionary) for each warning with
a different text"), python/cpython https://github.com/python/cpython/issues/97557 ("Memory leak:
warnings module", ``warnings.warn(str(random.random()))`` in a loop) and farcepest/MySQLdb1
https://github.com/farcepest/MySQLdb1/issues/108 (database warnings with dynamic content "stored in
``__warningregistry__`` forever").
"""
import logging
import warnings

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "__warningregistry__", "top": 1}


class LossOutlierWarning(UserWarning):
    pass


def warn_outliers(step, per_sample, limit):
    for i, l in enumerate(per_sample.tolist()):
        if l > limit:
            # the leak: a new text each time, so a new key in this module's __warningregistry__
            warnings.warn(f"step {step}: sample {i} has loss {l:.6f} above {limit:.2f}; "
                          f"check its label and augmentation", LossOutlierWarning)


def run(tracker_factory, steps=30):
    g = seed(3101)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    globals().pop("__warningregistry__", None)
    sink = logging.getLogger("py.warnings")
    quiet = logging.NullHandler()
    sink.addHandler(quiet)
    old_propagate, sink.propagate = sink.propagate, False
    logging.captureWarnings(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            with tracker_factory(model, optimizer=opt) as tracker:
                for step in range(steps):
                    x, y = batch(g, n=256)
                    per_sample = nn.functional.cross_entropy(model(x), y, reduction="none")
                    loss = per_sample.mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    warn_outliers(step, per_sample.detach(), limit=1.0)
                    tracker.step()
    finally:
        logging.captureWarnings(False)
        sink.removeHandler(quiet)
        sink.propagate = old_propagate
