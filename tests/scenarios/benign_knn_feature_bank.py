"""A kNN monitor for self-supervised training: every epoch the features of the whole training set
are extracted into a bank and the previous bank is replaced. Memory steps up at the first
monitor, then stays: one large allocation made once, not a leak.

Real case: the kNN monitor of SimSiam/MoCo training, https://github.com/facebookresearch/simsiam/issues/10
("after each epoch, we extract pool-5 features (l2-normalized) for each image in the training set,
and conduct a 200-NN"). Here an epoch is 8 steps; the bank (all 512 samples) is rebuilt under
``torch.no_grad()`` at each epoch's end and kept on the monitor until the next one.
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class KNNMonitor:
    def __init__(self, k=20):
        self.k = k
        self.bank = None

    @torch.no_grad()
    def rebuild(self, encoder, data):
        self.bank = nn.functional.normalize(encoder(data), dim=1)  # replaces the previous bank

    @torch.no_grad()
    def score(self, encoder, x):
        q = nn.functional.normalize(encoder(x), dim=1)
        return (q @ self.bank.T).topk(self.k, dim=1).values.mean().item()


def run(tracker_factory, steps=30):
    g = seed(45)
    encoder = MLP(hidden=128, d_out=256)
    opt = torch.optim.SGD(encoder.parameters(), lr=0.01)
    data = torch.randn(512, DIM, generator=g)
    monitor = KNNMonitor()
    with tracker_factory(encoder, optimizer=opt) as tracker:
        for step in range(steps):
            idx = torch.randint(0, len(data), (64,), generator=g)
            x = data[idx]
            z1 = encoder(x + 0.1 * torch.randn(x.shape, generator=g))
            z2 = encoder(x + 0.1 * torch.randn(x.shape, generator=g))
            loss = -nn.functional.cosine_similarity(z1, z2.detach()).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 8 == 7:
                monitor.rebuild(encoder, data)
                monitor.score(encoder, x)
            tracker.step()
