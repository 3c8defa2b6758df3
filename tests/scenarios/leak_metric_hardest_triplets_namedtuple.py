"""A triplet-loss miner keeps, for a later visualisation of what it mined, each step's hardest
triplet as a ``namedtuple`` of the anchor, positive and negative embeddings, taken straight from
the batch (not detached): each kept row is a view that keeps the whole batch's embedding matrix
(and a graph node chain) alive.

Real case: https://github.com/KevinMusgrave/pytorch-metric-learning/issues/27 (a miner with
``CrossBatchMemory``; embeddings kept across batches) and the kept-graph leak pattern of
https://github.com/TRI-ML/packnet-sfm/issues/47.
"""
from collections import namedtuple

import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "hardest", "top": 1}

Triplet = namedtuple("Triplet", "anchor positive negative margin_violation")


class BatchHardMiner:
    def __init__(self, margin=0.2):
        self.margin = margin
        self.hardest = []

    def __call__(self, emb, labels):
        d = torch.cdist(emb, emb)
        same = labels[:, None] == labels[None, :]
        hardest_pos = (d * same).max(1).values
        hardest_neg = (d + same * 1e4).min(1).values
        viol = hardest_pos - hardest_neg + self.margin
        i = int(viol.argmax())
        j = int((d[i] * same[i]).argmax())
        k = int((d[i] + same[i] * 1e4).argmin())
        self.hardest.append(Triplet(emb[i], emb[j], emb[k], viol[i]))  # the leak
        return torch.relu(viol).mean()


def run(tracker_factory, steps=30):
    g = seed(514)
    enc = MLP(hidden=256, d_out=64)
    opt = torch.optim.Adam(enc.parameters(), lr=1e-3)
    miner = BatchHardMiner()
    with tracker_factory(enc, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(96, DIM, generator=g)
            labels = torch.randint(0, 8, (96,), generator=g)
            emb = nn.functional.normalize(enc(x), dim=1)
            loss = miner(emb, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
