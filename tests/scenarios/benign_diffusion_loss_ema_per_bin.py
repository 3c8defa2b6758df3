"""A DDPM-style denoiser whose loss-aware timestep statistics are kept the bounded way: an
exponential moving average of the loss per timestep bin (ten bins over the 1000 steps) in a
preallocated tensor, updated in place from ``per_sample.detach()``, plus the last 50 step losses
as floats in a ``deque``. The per-bin statistic is touched every step and looks like a growing
log, but it is ten numbers.

Real case: justinlovelace/STAR-LDM https://github.com/justinlovelace/STAR-LDM/issues/3 (the
``LossEMASampler`` "tracks/logs statistics across noise levels" as an EMA per bin) and kohya-ss/
sd-scripts https://github.com/kohya-ss/sd-scripts/issues/1375 (a timestep distribution built from
the losses received per timestep).
"""
from collections import deque

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

T = 1000
D = 3 * 16 * 16


class Denoiser(nn.Module):
    def __init__(self, d=D, hidden=256):
        super().__init__()
        self.t_embed = nn.Embedding(T, hidden)
        self.inp = nn.Linear(d, hidden)
        self.mid = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, d)
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - torch.linspace(1e-4, 0.02, T), 0))

    def forward(self, x_t, t):
        h = torch.nn.functional.silu(self.inp(x_t) + self.t_embed(t))
        return self.out(torch.nn.functional.silu(self.mid(h)))


def run(tracker_factory, steps=30):
    g = seed(4106)
    model = Denoiser()
    opt = torch.optim.Adam(model.parameters(), lr=2e-4)
    bin_ema = torch.zeros(10)
    recent = deque(maxlen=50)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x0 = torch.randn(256, D, generator=g)
            t = torch.randint(0, T, (256,), generator=g)
            noise = torch.randn(256, D, generator=g)
            a = model.alphas_cumprod[t][:, None]
            x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
            pred = model(x_t, t)
            per_sample = ((pred - noise) ** 2).mean(1)
            loss = per_sample.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                bins = t * 10 // T
                sums = torch.zeros(10).index_add_(0, bins, per_sample.detach())
                counts = torch.bincount(bins, minlength=10).float()
                seen = counts > 0
                bin_ema[seen] = 0.9 * bin_ema[seen] + 0.1 * sums[seen] / counts[seen]
            recent.append(loss.item())
            tracker.step()
