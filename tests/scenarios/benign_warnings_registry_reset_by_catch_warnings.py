"""A loss-spike guard warns about each outlier sample with its index and loss in the message (a
new text each time, the pattern that fills ``__warningregistry__``), but the guard runs inside
``warnings.catch_warnings()`` with its own ``"default"`` filter, as library code often does to
scope a filter. Leaving ``catch_warnings`` restores the filters, which bumps the warnings module's
filter version, and the next ``warn`` call finds the registry stale and clears it: the registry
never holds more than one step's warnings. Looks like the registry leak, but it is bounded.

Real case: python/cpython https://github.com/python/cpython/issues/73858 (``catch_warnings`` "causes
all warnings to be printed every time": exiting it resets ``_filters_version``, which wipes the
registries) and python/cpython https://github.com/python/cpython/pull/8232 ("This avoids
``catch_warnings`` wiping out all module warning registries due to calling
``_filters_mutated``"), the flip side of https://github.com/python/cpython/issues/97557.
"""
import logging
import warnings

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class LossOutlierWarning(UserWarning):
    pass


def warn_outliers(step, per_sample, limit):
    with warnings.catch_warnings():  # restoring the filters on exit invalidates the registry
        warnings.simplefilter("default")
        for i, l in enumerate(per_sample.tolist()):
            if l > limit:
                warnings.warn(f"step {step}: sample {i} has loss {l:.6f} above {limit:.2f}; "
                              f"check its label and augmentation", LossOutlierWarning)


def run(tracker_factory, steps=30):
    g = seed(3112)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    globals().pop("__warningregistry__", None)
    sink = logging.getLogger("py.warnings")
    quiet = logging.NullHandler()
    sink.addHandler(quiet)
    old_propagate, sink.propagate = sink.propagate, False
    logging.captureWarnings(True)
    try:
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
