"""A contrastive-learning memory bank of detached embeddings, grown with ``torch.cat`` and meant to
be cut back to ``size`` rows; the cut only fires when the bank is exactly ``size`` rows long, which
with a batch of 48 and a size of 1000 never happens: ``self.bank`` is rebound larger every step.

Real case: https://github.com/tfzhou/ContrastiveSeg/issues/47 (bugs in the implementation of the
pixel memory bank, ``pixel_queue_ptr[lb] = (pixel_queue_ptr[lb] + 1) % self.memory_size``).
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "bank", "top": 1}


class MemoryBank:
    def __init__(self, dim, size=1000):
        self.size = size
        self.bank = torch.zeros(0, dim)

    def update(self, feats):
        self.bank = torch.cat([self.bank, feats.detach()])
        if self.bank.shape[0] == self.size:  # bug: should be >=
            self.bank = self.bank[-self.size:]

    def negatives(self):
        return self.bank


def info_nce(q, k, negs, tau=0.1):
    pos = (q * k).sum(1, keepdim=True)
    neg = q @ negs.T if negs.shape[0] else torch.zeros(q.shape[0], 0)
    logits = torch.cat([pos, neg], 1) / tau
    return nn.functional.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long))


def run(tracker_factory, steps=30):
    g = seed(513)
    enc = MLP(hidden=128, d_out=128)
    opt = torch.optim.SGD(enc.parameters(), lr=0.03)
    mem = MemoryBank(128)
    with tracker_factory(enc, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(48, DIM, generator=g)
            q = nn.functional.normalize(enc(x + 0.1 * torch.randn(48, DIM, generator=g)), dim=1)
            k = nn.functional.normalize(enc(x + 0.1 * torch.randn(48, DIM, generator=g)), dim=1)
            loss = info_nce(q, k.detach(), mem.negatives())
            opt.zero_grad()
            loss.backward()
            opt.step()
            mem.update(k)
            tracker.step()
