"""A small diffusion model trained with an EMA copy; every fifth step it samples a preview batch
with a DPM-Solver++(2M)-style multistep scheduler created once and reused across previews. The
scheduler keeps ``model_outputs`` (a list of ``solver_order`` = 2 slots shifted each solver step),
``timesteps`` and ``sigmas`` between calls: after a preview it still holds the last two denoiser
outputs of that preview batch (no grad), and ``set_timesteps`` rebuilds its schedule at the next one.
The trainer keeps only the latest preview. Stale tensors stay on the scheduler between previews, but
their number and size are fixed: bounded, not a leak.

Real case: huggingface/diffusers https://github.com/huggingface/diffusers/issues/8711 ("Error thrown in
``scheduling_dpmsolver_multistep`` when re-used between validation steps": "The ``model_output_list``
contains a value from the previous batch in the last position").
"""
import copy

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

T_TRAIN, C, S = 1000, 3, 16


class Denoiser(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.t_embed = nn.Sequential(nn.Linear(1, ch), nn.SiLU(), nn.Linear(ch, ch))
        self.inp = nn.Conv2d(C, ch, 3, padding=1)
        self.mid = nn.Conv2d(ch, ch, 3, padding=1)
        self.out = nn.Conv2d(ch, C, 3, padding=1)

    def forward(self, x, t):
        h = nn.functional.silu(self.inp(x) + self.t_embed(t.float()[:, None] / T_TRAIN)[..., None, None])
        return self.out(nn.functional.silu(self.mid(h)))


class DPMSolverMultistep:
    def __init__(self, solver_order=2):
        betas = torch.linspace(1e-4, 0.02, T_TRAIN)
        self.alphas_cumprod = torch.cumprod(1 - betas, 0)
        self.solver_order = solver_order
        self.model_outputs = [None] * solver_order
        self.timesteps = None
        self.lower_order_nums = 0

    def set_timesteps(self, n):
        self.timesteps = torch.linspace(T_TRAIN - 1, 0, n).round().long()
        self.lower_order_nums = 0  # model_outputs are not cleared, as in diffusers

    def _alpha_sigma(self, t):
        a = self.alphas_cumprod[t]
        return a.sqrt(), (1 - a).sqrt()

    def step(self, eps, i, x):
        t = self.timesteps[i]
        prev_t = self.timesteps[i + 1] if i + 1 < len(self.timesteps) else torch.tensor(0)
        a_t, s_t = self._alpha_sigma(t)
        a_p, s_p = self._alpha_sigma(prev_t)
        x0 = (x - s_t * eps) / a_t
        for k in range(self.solver_order - 1):
            self.model_outputs[k] = self.model_outputs[k + 1]
        self.model_outputs[-1] = x0
        lam_t, lam_p = torch.log(a_t / s_t), torch.log(a_p / s_p)
        h = lam_p - lam_t
        if self.lower_order_nums < 1 or self.model_outputs[0] is None:
            d = x0
        else:
            d = 1.5 * x0 - 0.5 * self.model_outputs[0]
        self.lower_order_nums = min(self.lower_order_nums + 1, self.solver_order)
        return (s_p / s_t) * x - a_p * torch.expm1(-h) * d


def run(tracker_factory, steps=30):
    g = seed(8711)
    model = Denoiser()
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4)
    scheduler = DPMSolverMultistep()
    alphas_cumprod = scheduler.alphas_cumprod
    last_preview = None
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x0 = torch.rand(32, C, S, S, generator=g) * 2 - 1
            t = torch.randint(0, T_TRAIN, (32,), generator=g)
            noise = torch.randn(x0.shape, generator=g)
            a = alphas_cumprod[t].view(-1, 1, 1, 1)
            loss = nn.functional.mse_loss(model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t), noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters()):
                    pe.lerp_(pm, 1e-2)
                if step % 5 == 4:  # preview with the shared scheduler
                    scheduler.set_timesteps(10)
                    x = torch.randn(64, C, S, S, generator=g)
                    for i, tt in enumerate(scheduler.timesteps):
                        x = scheduler.step(ema(x, tt.expand(64)), i, x)
                    last_preview = x.clamp(-1, 1)
            tracker.step()
