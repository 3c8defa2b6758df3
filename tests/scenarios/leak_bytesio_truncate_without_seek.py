"""A weights-fingerprint utility for experiment tracking: every step it serializes the model's
state dict with ``torch.save`` into one reused ``io.BytesIO`` and logs the SHA-256 of the bytes (to
tell whether the weights changed, as artifact trackers do). To "empty" the buffer it calls
``self._buffer.truncate(0)`` but never ``seek(0)``: in Python 3 ``truncate`` does not move the
position, so each ``torch.save`` writes after a zero-filled gap as long as everything written
before. The buffer grows by one serialized state dict (about 300 KiB) per step; the digest still
changes whenever the weights change, so nothing looks wrong. The growth is the BytesIO's own byte
buffer, not a tensor.

Real case: ros/ros_comm https://github.com/ros/ros_comm/pull/1785 ("more Python 3 compatibility -
truncate(0) needs seek(0)": "In Python 3 that is not the case ... s.truncate(0) ... s.tell()  # 2")
and the in-memory ``torch.save`` idiom from pytorch/pytorch
https://github.com/pytorch/pytorch/issues/6163 (``buffer = io.BytesIO(); torch.save(the_model,
buffer)``).
"""
import hashlib
import io

import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "_buffer", "top": 1}


class WeightsFingerprint:
    def __init__(self):
        self._buffer = io.BytesIO()
        self.last_digest = None

    def update(self, model):
        self._buffer.truncate(0)  # the leak: no seek(0), the next write lands after the old bytes
        torch.save(model.state_dict(), self._buffer)
        with self._buffer.getbuffer() as view:
            self.last_digest = hashlib.sha256(view).hexdigest()
        return self.last_digest


def run(tracker_factory, steps=30):
    g = seed(137)
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
