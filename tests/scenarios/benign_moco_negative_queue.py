"""A MoCo negative-key queue: a fixed-size buffer of detached keys, overwritten in place at a
moving pointer every step. It is allocated once with the model; every step writes into it, none
grows it. Memory is flat although the queue is written on every step.

Real case: MoCo's ``_dequeue_and_enqueue`` in
https://github.com/facebookresearch/moco/blob/main/moco/builder.py (``register_buffer("queue",
torch.randn(dim, K))``, then ``self.queue[:, ptr : ptr + batch_size] = keys.T`` under
``torch.no_grad()`` and ``ptr = (ptr + batch_size) % self.K``); the logits use
``self.queue.clone().detach()``. Here a momentum key encoder and a 1024-key queue of 64-d keys.
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class MoCo(nn.Module):
    def __init__(self, dim=64, K=1024, m=0.99, T=0.07):
        super().__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = MLP(hidden=128, d_out=dim)
        self.encoder_k = MLP(hidden=128, d_out=dim)
        for pq, pk in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            pk.data.copy_(pq.data)
            pk.requires_grad = False
        self.register_buffer("queue", nn.functional.normalize(torch.randn(dim, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for pq, pk in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            pk.mul_(self.m).add_(pq.mul(1.0 - self.m))

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        n = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + n] = keys.T  # in place: the queue never grows
        self.queue_ptr[0] = (ptr + n) % self.K

    def forward(self, im_q, im_k):
        q = nn.functional.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = nn.functional.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels


def run(tracker_factory, steps=30):
    g = seed(60)
    model = MoCo()
    opt = torch.optim.SGD(model.encoder_q.parameters(), lr=0.03, momentum=0.9)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(64, DIM, generator=g)
            im_q = x + 0.1 * torch.randn(x.shape, generator=g)
            im_k = x + 0.1 * torch.randn(x.shape, generator=g)
            logits, labels = model(im_q, im_k)
            loss = nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
