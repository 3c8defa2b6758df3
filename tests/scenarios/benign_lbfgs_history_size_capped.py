"""Full-batch L-BFGS fine-tuning of a small regression head: every ``opt.step(closure)`` appends a
curvature pair (``y``, ``s``: two flat vectors the size of all the parameters) to the optimizer's
``old_dirs``/``old_stps`` history, so memory climbs by two parameter copies a step at first and
looks like a leak. The history is capped at ``history_size`` (here 6): after six steps the oldest
pair is popped for every new one and memory stays flat.

Real case: ProGamerGov/neural-style-pt https://github.com/ProGamerGov/neural-style-pt/issues/7
(L-BFGS memory is set by ``history_size``: "torch.optim.lbfgs class uses a default value of 100 if
history_size is not set", so lowering it is how users cap the optimizer's memory).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(5104)
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=1, history_size=6)
    x = torch.randn(512, 64, generator=g)
    y = torch.sin(x[:, :1]) + 0.1 * torch.randn(512, 1, generator=g)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            opt.step(closure)
            tracker.step()
