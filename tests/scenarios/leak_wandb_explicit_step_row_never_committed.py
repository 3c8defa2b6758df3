"""Sample predictions logged to a W&B-style run every training step with an explicit
``step=epoch`` (so that the images line up with the epoch-level metrics) and a key per batch
(``samples/batch_{i}``): ``run.log({f"samples/batch_{i}": image}, step=epoch)``. With an explicit
step and no ``commit=True``, wandb merges the data into the pending history row and commits it only
when a larger step arrives, i.e. at the next epoch. Every batch adds new keys, so the pending row
(``run._pending``) holds every batch's preview image (a uint8 numpy array) for the whole epoch; with
long epochs (here longer than the run) it only grows.

Real case: pytorch/torchtitan https://github.com/pytorch/torchtitan/pull/4818 ("When a step is passed
explicitly, W&B buffers the metrics instead of committing the row"; fix: ``commit=True``) and
wandb/wandb https://github.com/wandb/wandb/issues/554 (maintainer: "When you're specifying step we
only commit the data when the step increases ... If you specify commit=False we'll 'rollup' the calls
to wandb.log and only commit the results in commit=True").
"""
import torch
from torch import nn

from ._common import seed
from ._wandb_like import Run

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_pending", "top": 1}
STEPS_PER_EPOCH = 1000


class SmallUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.dec = nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, x):
        return self.dec(self.enc(x))


def to_image(t):
    return (t.detach().clamp(0, 1) * 255).to(torch.uint8).permute(1, 2, 0).numpy()


def run(tracker_factory, steps=30):
    g = seed(4818)
    model = SmallUNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    wandb_run = Run()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            epoch, i = divmod(step, STEPS_PER_EPOCH)
            x = torch.rand(8, 3, 64, 64, generator=g)
            noisy = x + 0.1 * torch.randn(8, 3, 64, 64, generator=g)
            out = model(noisy)
            loss = nn.functional.mse_loss(out, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            wandb_run.log({"train/loss": loss.item()}, step=epoch)
            # the leak: a new key per batch, pending until the epoch's step advances
            wandb_run.log({f"samples/batch_{i}": [to_image(out[k]) for k in range(4)]}, step=epoch)
            tracker.step()
