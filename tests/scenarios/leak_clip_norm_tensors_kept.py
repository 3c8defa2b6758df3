"""A trainer logs the total gradient norm returned by ``clip_grad_norm_`` every step into
``self.grad_norms`` as the 0-d tensor itself (not ``.item()``), to plot "how the norm changes over
time" at the end of the run. Each kept norm is a tiny tensor (4 bytes of data plus the tensor
object), so the growth is small but unbounded: a slow leak.

Real case: "clip_norm should return total norm" https://github.com/pytorch/pytorch/issues/1032
(the return value was added "to be able to log if clipping occurred, or how the norm changes over
time"), and the classic tensor-logging leak of https://github.com/thuml/Autoformer/issues/130
("should be total_loss.append(loss.item())").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "grad_norms", "top": 1}


class Trainer:
    def __init__(self, model, max_norm=1.0):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        self.max_norm = max_norm
        self.grad_norms = []

    def train_step(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        self.grad_norms.append(norm)  # the leak (a slow one): a tensor per step, never trimmed
        self.opt.step()
        return loss.item()


def run(tracker_factory, steps=30):
    g = seed(114)
    trainer = Trainer(MLP(hidden=128))
    with tracker_factory(trainer.model, optimizer=trainer.opt) as tracker:
        for _ in range(steps):
            trainer.train_step(*batch(g, n=64))
            tracker.step()
