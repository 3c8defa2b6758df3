"""A preemption guard installs a ``SIGTERM`` handler that saves the latest batch and weights, and,
to be a good citizen, chains to whatever handler was installed before it (``prev =
signal.getsignal(...)``; the new handler calls ``prev``). The guard is installed in the step
function instead of once, so each step wraps the previous handler in a new closure: only the
newest handler is installed, but through each closure's ``prev`` cell it keeps every older one,
with the batch and weight copy each of them captured.

Real case: radixark/miles https://github.com/radixark/miles/pull/1472 (review: "The signal
handlers are chained by capturing ``prev`` in a closure ... this creates a reference leak/memory
leak because the signal handler chain keeps growing and holding references to old, shut-down
``SessionServerSupervisor`` instances") and the same unbounded wrapper chain in
modelcontextprotocol/typescript-sdk https://github.com/modelcontextprotocol/typescript-sdk/issues/2607
("each request adds another layer to this chain ... every request retains one more closure (plus
whatever it captures)").
"""
import signal

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "on_sigterm", "top": 1}


def install_preemption_guard(model, x, y, step):
    snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
    prev = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        torch.save({"step": step, "state": snapshot, "batch": (x, y)}, "/tmp/preempted.pt")
        if callable(prev):
            prev(signum, frame)  # the leak: each handler keeps the one before it
        else:
            raise SystemExit(143)

    signal.signal(signal.SIGTERM, on_sigterm)


def run(tracker_factory, steps=30):
    g = seed(3111)
    model = MLP(hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    original = signal.getsignal(signal.SIGTERM)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                x, y = batch(g, n=256)
                install_preemption_guard(model, x, y, step)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        signal.signal(signal.SIGTERM, original)
