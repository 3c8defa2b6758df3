"""A trainer that logs the gradient norm before stepping: ``torch.autograd.grad(loss, params,
retain_graph=True)`` computes the gradients for the norm, then ``loss.backward()`` runs through
the same graph. ``retain_graph=True`` on every step and the trainer keeping ``self.last_loss``
(the loss *tensor*, with its graph) to re-run backward after a NaN skip look like a graph leak; but
the final ``backward()`` frees what the graph saved, ``last_loss`` is overwritten each step (one
step's emptied graph at most), and only floats are logged. Memory is flat.

Real case: "Memory Leak in torch.autograd.grad" https://github.com/pytorch/pytorch/issues/64586
(growth blamed on ``autograd.grad``; the actual cause was a loss kept without ``.item()``), and the
retain_graph question in "GPU memory leak on Pytorch 1.0?"
https://github.com/pytorch/pytorch/issues/17568 ("the graph is not always held. It's held when
PyTorch determines it needs to be held").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        self.last_loss = None
        self.grad_norms = []

    def step(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        params = [p for p in self.model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        self.grad_norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.last_loss = loss  # overwritten next step
        return loss.item()


def run(tracker_factory, steps=30):
    g = seed(5608)
    model = MLP(hidden=256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trainer = Trainer(model, opt)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            trainer.step(x, y)
            tracker.step()
