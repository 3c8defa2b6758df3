"""A sparse autoencoder's training loop keeps, for monitoring, a strided slice of the codes in a
``logs`` dict of lists. The slice is detached but is a view: each one keeps the whole batch of codes
alive, and the list is never emptied. Kept at each monitoring interval only, the growth is a
staircase: one batch of codes per interval.

Real case: overcomplete https://github.com/KempnerInstitute/overcomplete/issues/5 (``logs['z']
.append(z.detach()[::10])``: "This grows indefinitely on GPU RAM"; the fix copies to the CPU). The
interval is this scenario's: the report keeps a slice each time its monitoring runs.
"""
import torch
from torch import nn

from ._common import batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "logs", "top": 1}

MONITOR_EVERY = 4


class SAE(nn.Module):
    def __init__(self, d=64, codes=1024):
        super().__init__()
        self.enc = nn.Linear(d, codes)
        self.dec = nn.Linear(codes, d)

    def forward(self, x):
        z = torch.relu(self.enc(x))
        return z, self.dec(z)


def run(tracker_factory, steps=40):
    g = seed(23)
    model = SAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    logs = {"z": [], "loss": []}
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=128, d=64)
            z, x_hat = model(x)
            loss = (x_hat - x).square().mean() + 1e-3 * z.abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % MONITOR_EVERY == 0:
                logs["loss"].append(loss.item())
                logs["z"].append(z.detach()[::10])  # the leak: a view keeps the whole batch of codes
            tracker.step()
