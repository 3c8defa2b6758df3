"""Gradient caching (GradCache) for a contrastive loss, as in benign_gradcache_window_reps, with
the window caches emptied correctly after each optimizer step, but each window's contrastive loss
kept for logging as the tensor itself (``window_losses.append(loss)``). The loss was computed from
the window's concatenated representations, made leaf tensors with ``requires_grad_()``: its graph
ends in their ``AccumulateGrad`` nodes, which hold the leaves and, after ``backward()``, their
``.grad``. So every window leaves two copies of all its representations behind: memory steps up
once per window, a slow staircase that a short look could take for the sawtooth of the caches.

Real case: luyug/GradCache https://github.com/luyug/GradCache/issues/22 (the loop with ``loss =
contrastive_loss(cache_x, cache_y)`` per window) and the PyTorch FAQ
https://pytorch.org/docs/stable/notes/faq.html ("Don't accumulate history across your training
loop": ``total_loss += loss`` keeps each iteration's graph; use ``loss.item()``).
"""

import torch
from torch import nn

from ._common import MLP, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "window_losses", "top": 1}
WINDOW = 3


def run(tracker_factory, steps=30):
    g = seed(5704)
    encoder = MLP(hidden=256, d_out=256)
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    cache_q, cache_d, inputs_q, inputs_d = [], [], [], []
    window_losses = []
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
                window_losses.append(loss)  # the leak: window_losses.append(loss.item())
                cache_q, cache_d, inputs_q, inputs_d = [], [], [], []
                del reps_q, reps_d, scores, loss, grads_q, grads_d
            tracker.step()
