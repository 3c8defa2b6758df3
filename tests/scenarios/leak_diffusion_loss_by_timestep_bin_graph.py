"""A DDPM-style denoiser trained with a uniform timestep sampler; to see which noise levels the
model struggles with, the loop also tracks the loss per timestep bin (ten bins over the 1000
steps) in ``loss_by_bin``, a dict of lists that feeds a loss-aware sampler and a plot at the end.
The per-sample errors for the bins are computed on a second branch, ``((pred - noise) ** 2)``,
from the prediction that still requires grad, and each bin's mean is appended without
``.detach()``. ``loss.backward()`` only walks the branch that made ``loss``: the logging branch is
never backpropagated, so the buffer its ``pow`` saved (the whole ``pred - noise`` batch, about
768 KiB a step) stays alive under every bin mean kept.

Real case: justinlovelace/STAR-LDM https://github.com/justinlovelace/STAR-LDM/issues/3 (a
``LossEMASampler`` that "tracks/logs statistics across noise levels") and kohya-ss/sd-scripts
https://github.com/kohya-ss/sd-scripts/issues/1375 (a timestep distribution "based on received
loss values" per timestep); the detach rule for logged losses is
https://github.com/huggingface/transformers/pull/6999 ("we don't call ``.detach()``, which means
some variables are kept forever for a backward pass (that is never called)").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "loss_by_bin", "top": 1}

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
    g = seed(4105)
    model = Denoiser()
    opt = torch.optim.Adam(model.parameters(), lr=2e-4)
    loss_by_bin = {b: [] for b in range(10)}
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x0 = torch.randn(256, D, generator=g)
            t = torch.randint(0, T, (256,), generator=g)
            noise = torch.randn(256, D, generator=g)
            a = model.alphas_cumprod[t][:, None]
            x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
            pred = model(x_t, t)
            loss = nn.functional.mse_loss(pred, noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            per_sample = ((pred - noise) ** 2).mean(1)  # a second branch, never backpropagated
            bins = t * 10 // T
            for b in bins.unique().tolist():
                loss_by_bin[b].append(per_sample[bins == b].mean())  # the leak: no .detach()
            tracker.step()
