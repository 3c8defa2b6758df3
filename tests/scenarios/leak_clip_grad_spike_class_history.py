"""A gradient-clipping helper class records, for debugging loss spikes, a copy of every gradient
whenever the total norm exceeds a threshold, in a class attribute shared by all instances; the
threshold (meant for a normalised loss) is below every norm this model produces, so every step
stores a full copy of the gradients.

Real case: https://github.com/pytorch/pytorch/issues/1032 (``clip_grad_norm`` returning the total
norm "to be able to log if clipping occurred, or how the norm changes over time"), and the
unbounded-logger leak of https://github.com/oxwhirl/pymarl/pull/73 ("the stats should be cleared
periodically to avoid accumulating unnecessary logs in the memory").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "spikes", "top": 1}


class GradClipper:
    spikes = []  # class attribute: shared, never trimmed

    def __init__(self, params, max_norm=1.0, spike_at=1e-3):
        self.params = list(params)
        self.max_norm = max_norm
        self.spike_at = spike_at

    def __call__(self, step):
        norm = nn.utils.clip_grad_norm_(self.params, self.max_norm)
        if norm > self.spike_at:
            GradClipper.spikes.append((step, norm, [p.grad.clone() for p in self.params]))
        return norm


def run(tracker_factory, steps=30):
    g = seed(518)
    model = MLP(hidden=96)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clipper = GradClipper(model.parameters())
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            clipper(step)
            opt.step()
            tracker.step()
