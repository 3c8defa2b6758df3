"""A MoCo-style negative-key queue of fixed size, updated with the keys WITHOUT ``detach()``: the
queue stays the same size, but each step's queue is ``cat([keys, old_queue])[:K]``, whose graph
keeps the previous queue, its keys and the key encoder's activations: a chain one step longer
each step.

Real case: https://github.com/facebookresearch/moco/issues/128 proposes the FIFO update
``self.queue = torch.cat((keys.T, self.queue), 1)[:, :K]``; MoCo computes ``keys`` under
``torch.no_grad()`` (its ``_dequeue_and_enqueue`` is ``@torch.no_grad()``), and a copy that drops
that decorator keeps each step's graph; compare the "cloning/reusing a tensor with a large
computation graph attached" leak of https://github.com/pytorch/pytorch/issues/140792.
"""
import torch
from torch import nn

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "queue", "top": 1}


class Contrast(nn.Module):
    def __init__(self, k=256, d=16):
        super().__init__()
        self.encoder_q = MLP(d_out=d, hidden=128)
        self.encoder_k = MLP(d_out=d, hidden=128)
        self.k = k
        self.queue = torch.randn(k, d)

    def forward(self, x):
        q = nn.functional.normalize(self.encoder_q(x), dim=1)
        keys = nn.functional.normalize(self.encoder_k(x + 0.1 * torch.randn_like(x)), dim=1)
        logits = torch.cat([(q * keys).sum(1, keepdim=True), q @ self.queue.detach().t()], dim=1)
        self.queue = torch.cat([keys, self.queue])[: self.k]  # the leak: keys not detached
        return logits


def run(tracker_factory, steps=30):
    g = seed(42)
    model = Contrast()
    opt = torch.optim.SGD(model.encoder_q.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, _ = batch(g, n=64, d=DIM)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, torch.zeros(len(x), dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
