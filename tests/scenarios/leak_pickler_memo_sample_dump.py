"""The trainer streams per-step samples (inputs and logits) to a dump file for offline error
analysis through one long-lived ``pickle.Pickler``, calling ``dump`` once a step so that the file
is a sequence of pickles. A ``Pickler`` memoizes every object it has written, so that a later
reference to the same object is written as a back-reference; the memo maps ``id(obj)`` to the
object itself and is only emptied by ``clear_memo()``. Without that call, every record dict and
every tensor ever dumped stays alive in ``sample_pickler``'s memo, though the bytes already went to
disk.

Real case: the ``clear_memo`` documentation added to CPython in
https://github.com/python/cpython/pull/125762 (from https://github.com/python/cpython/issues/125756:
"The pickler class will store child-objects to its self.memo"; "it is need when reusing
``Pickler`` objects") and https://runebook.dev/en/docs/python/library/pickle/pickle.Pickler.clear_memo
("If you reuse a Pickler instance without calling clear_memo(), the memo from the previous run
persists").
"""
import os
import pickle
import tempfile

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "sample_pickler", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(3106)
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
                # the leak: the memo keeps every dumped object (no clear_memo())
                sample_pickler.dump({"step": step, "x": x, "y": y, "logits": logits.detach()})
                tracker.step()
    finally:
        f.close()
        os.unlink(path)
