"""A diffusion training script draws a preview sample every third step with its DDPM sampling
loop, outside ``torch.no_grad()``, and keeps the previews in a module-level dict keyed by step for
a final figure: each preview holds the graph of the whole denoising chain.

Real case: https://github.com/TeaPearce/Conditional_Diffusion_MNIST/issues/12 ("sampling from a
trained model consumes significant memory ... it is helpful to add a line x_i = x_i.detach() at
the end of the for loop in function DDPM.sample").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "PREVIEWS", "top": 1}

X, T = 48, 6
PREVIEWS = {}


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(X + 1, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU(), nn.Linear(128, X))

    def forward(self, x, t):
        return self.net(torch.cat([x, t.expand(x.shape[0], 1)], 1))


betas = torch.linspace(1e-3, 0.2, T)
alphas = 1 - betas
abar = torch.cumprod(alphas, 0)


def sample(model, g, n=32):
    x = torch.randn(n, X, generator=g)
    for i in reversed(range(T)):
        eps = model(x, torch.tensor([[i / T]]))
        x = (x - betas[i] / (1 - abar[i]).sqrt() * eps) / alphas[i].sqrt()
        if i > 0:
            x = x + betas[i].sqrt() * torch.randn(n, X, generator=g)
    return x  # the chain's graph comes along


def run(tracker_factory, steps=30):
    g = seed(508)
    PREVIEWS.clear()
    model = Denoiser()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x0 = torch.randn(64, X, generator=g)
            t = torch.randint(0, T, (64,), generator=g)
            noise = torch.randn(64, X, generator=g)
            xt = abar[t].sqrt()[:, None] * x0 + (1 - abar[t]).sqrt()[:, None] * noise
            loss = nn.functional.mse_loss(model.net(torch.cat([xt, (t[:, None] / T).float()], 1)), noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 3 == 0:
                PREVIEWS[step] = sample(model, g)  # the leak: no torch.no_grad()
            tracker.step()
