"""Activation debugging for quantization accuracy: a ``torch.ao.quantization.RecordingObserver``
is attached after the hidden layer (as ``default_debug_qconfig`` does) to collect the runtime
activations, and is then left in the model while it keeps training. ``RecordingObserver.forward``
does ``self.tensor_val.append(x.clone())`` on every call and nothing ever empties
``tensor_val``, so each step's hidden activations (a 256x256 float copy, 256 KiB) stay alive.

Real case: "add the tensor_observer to record the runtime tensor for quantization accuracy
analysis" https://github.com/pytorch/pytorch/pull/25830 (the observer, later RecordingObserver,
that records every runtime tensor it sees, meant for a short debugging run, not a training loop).
"""
import torch
from torch import nn
from torch.ao.quantization.observer import RecordingObserver

from ._common import batch, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "act_obs.tensor_val", "top": 1}


class DebugNet(nn.Module):
    def __init__(self, d_in=32, hidden=256, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act_obs = RecordingObserver()  # debug observer left in after the accuracy analysis
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.act_obs(h)
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(311)
    model = DebugNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=256)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
