"""The trainer streams per-step samples to a dump file through one long-lived ``pickle.Pickler``,
and calls ``clear_memo()`` after each ``dump``: the memo that maps every written object to itself
is emptied each step, so nothing dumped is kept once the step's own references go. Looks like the
leaking variant (a long-lived pickler fed tensors each step) but is bounded.

Real case: the documented fix in https://github.com/python/cpython/pull/125762 ("Document
``Pickler.clear_memo``": "When reusing picklers, this method should be called after every call to
dump"), from https://github.com/python/cpython/issues/125756.
"""
import os
import pickle
import tempfile

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(3107)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fd, path = tempfile.mkstemp(suffix=".pkl")
    f = os.fdopen(fd, "wb")
    sample_pickler = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=256)
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sample_pickler.dump({"step": step, "x": x, "y": y, "logits": logits.detach()})
                sample_pickler.clear_memo()
                tracker.step()
    finally:
        f.close()
        os.unlink(path)
