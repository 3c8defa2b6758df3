"""The same weights-fingerprint utility as ``leak_bytesio_truncate_without_seek``, written right:
before every ``torch.save`` into the reused ``io.BytesIO`` it calls ``seek(0)`` and then
``truncate()``, so the buffer holds one serialized state dict (about 300 KiB) at a time. A large
buffer is rewritten every step, but memory is flat.

Real case: ros/ros_comm https://github.com/ros/ros_comm/pull/1785 ("truncate(0) needs seek(0)" in
Python 3) and the in-memory ``torch.save`` idiom of pytorch/pytorch
https://github.com/pytorch/pytorch/issues/6163.
"""
import hashlib
import io

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class WeightsFingerprint:
    def __init__(self):
        self._buffer = io.BytesIO()
        self.last_digest = None

    def update(self, model):
        self._buffer.seek(0)
        self._buffer.truncate()
        torch.save(model.state_dict(), self._buffer)
        with self._buffer.getbuffer() as view:
            self.last_digest = hashlib.sha256(view).hexdigest()
        return self.last_digest


def run(tracker_factory, steps=30):
    g = seed(139)
    model = MLP(hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    fingerprint = WeightsFingerprint()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fingerprint.update(model)
            tracker.step()
