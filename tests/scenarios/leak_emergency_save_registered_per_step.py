"""A "crash-safe" trainer registers an emergency save with ``atexit`` so that the last good
weights reach disk if the process exits early. It registers inside the step, with a fresh copy of
the weights as the callback's argument, instead of once with a reference to the model. ``atexit``
keeps every registered callback with its arguments until the interpreter exits (there is no limit
and no replacement), so every step adds one full copy of the weights to the atexit list.

Real case: cherrypy/cherrypy https://github.com/cherrypy/cherrypy/issues/1274 ("At every bus
start(), a small amount of memory is leaked by calling atexit.register repeatedly"),
ponty/EasyProcess https://github.com/ponty/EasyProcess/issues/1 ("every time the main process is
starting the subprocess, the new reference to **shutdown** is stored globally within **atexit**,
causing a memory leak") and DataDog/dd-trace-py https://github.com/DataDog/dd-trace-py/pull/2409
("If you had a million tracer over the lifespan of your program, then you would have a million
tracers kept around to be shutdown at exit time").
"""
import atexit

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "atexit", "top": 1}


def _emergency_save(state, step):
    torch.save(state, f"/tmp/emergency_step{step}.pt")


def run(tracker_factory, steps=30):
    g = seed(3108)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if torch.isfinite(loss):
                    snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    atexit.register(_emergency_save, snapshot, step)  # the leak: one per step, never replaced
                tracker.step()
    finally:
        atexit.unregister(_emergency_save)
