"""Asynchronous checkpointing every 5 steps, in the manner of ``dcp.async_save`` called without a
user-provided stager: each save creates a fresh ``DefaultStager``-like object that copies the
state dict to CPU storage in a background thread and caches those copies on itself for reuse. The
checkpointer keeps every stager it made (to ``close()`` them at shutdown, which never happens
mid-run), so each save leaves a full copy of the model and optimizer state behind. Growth happens
only every fifth step and only on the background thread.

Real case: "[dcp] Memory Leak in torch.distributed.checkpoint.async_save with Nightly 2.10.0"
https://github.com/pytorch/pytorch/issues/170163 and its fix
https://github.com/pytorch/pytorch/pull/170431 (``async_save`` without an ``async_stager`` creates
an internal ``DefaultStager`` that caches CPU storage copies; the cache was never cleared).
"""
import io
import threading

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_stagers", "top": 1}
SAVE_EVERY = 5


class DefaultStager:
    def __init__(self):
        self.cache = {}  # name -> CPU copy, meant for reuse across saves of the same stager

    def stage(self, state):
        for k, v in state.items():
            self.cache[k] = v.detach().clone()
        return self.cache


class AsyncCheckpointer:
    def __init__(self):
        self._stagers = []
        self._threads = []

    def async_save(self, model, opt):
        state = dict(model.state_dict())
        for i, s in opt.state_dict()["state"].items():
            state.update({f"optim.{i}.{k}": v for k, v in s.items() if torch.is_tensor(v)})
        stager = DefaultStager()  # a new stager per call: its cache is never reused or cleared
        self._stagers.append(stager)

        def work():
            staged = stager.stage(state)
            torch.save(staged, io.BytesIO())

        t = threading.Thread(target=work, daemon=True)
        t.start()
        self._threads.append(t)

    def wait(self):
        for t in self._threads:
            t.join()
        self._threads.clear()


def run(tracker_factory, steps=30):
    g = seed(401)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ckpt = AsyncCheckpointer()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = torch.randn(64, 128, generator=g), torch.randint(0, 10, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % SAVE_EVERY == 0:
                ckpt.wait()  # the previous save has finished before the next starts
                ckpt.async_save(model, opt)
            tracker.step()
    ckpt.wait()
