"""Gradient caching (GradCache) for a contrastive loss over a large effective batch: each step
encodes one sub-batch of queries and documents without a graph and keeps the representations (and
the inputs, to re-encode them later) in the window's cache; after ``WINDOW`` sub-batches the loss is
computed over the whole window's representations, the gradients with respect to the
representations are taken, each sub-batch is re-encoded with a graph and backpropagated with its
cached representation gradient, the optimizer steps and the caches are emptied. Memory climbs for
``WINDOW`` steps and falls back at each window end: a sawtooth bounded by one window.

Real case: luyug/GradCache https://github.com/luyug/GradCache/issues/22 (the loop: ``cache_x.append(rx)``
per sub-batch, ``if (step + 1) % 16 == 0`` compute the contrastive loss, run the closures, then
``cache_x = []``) and sentence-transformers' CachedMultipleNegativesRankingLoss
https://github.com/huggingface/sentence-transformers/pull/3612 ("reset caches after each optimizer
step"). Benign twin of leak_gradcache_window_loss_kept.
"""

import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
WINDOW = 6


def run(tracker_factory, steps=30):
    g = seed(5703)
    encoder = MLP(hidden=256, d_out=256)
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    cache_q, cache_d, inputs_q, inputs_d = [], [], [], []
    with tracker_factory(encoder, optimizer=opt) as tracker:
        for step in range(steps):
            xq = torch.randn(128, 32, generator=g)
            xd = xq + 0.1 * torch.randn(128, 32, generator=g)
            with torch.no_grad():
                cache_q.append(encoder(xq))
                cache_d.append(encoder(xd))
            inputs_q.append(xq)
            inputs_d.append(xd)
            if (step + 1) % WINDOW == 0:
                reps_q = torch.cat(cache_q).requires_grad_()
                reps_d = torch.cat(cache_d).requires_grad_()
                scores = nn.functional.normalize(reps_q, dim=1) @ nn.functional.normalize(reps_d, dim=1).T
                loss = nn.functional.cross_entropy(scores / 0.05, torch.arange(len(scores)))
                loss.backward()
                grads_q = reps_q.grad.split(128)
                grads_d = reps_d.grad.split(128)
                opt.zero_grad()
                for xq_i, xd_i, gq, gd in zip(inputs_q, inputs_d, grads_q, grads_d, strict=True):
                    surrogate = (encoder(xq_i) * gq).sum() + (encoder(xd_i) * gd).sum()
                    surrogate.backward()
                opt.step()
                cache_q, cache_d, inputs_q, inputs_d = [], [], [], []
                del reps_q, reps_d, scores, loss, grads_q, grads_d
            tracker.step()
