"""Preview images logged to a W&B-style run every training step with ``commit=False``
(``run.log({"samples/pred": ..., "samples/target": ...}, commit=False)``), and the loss committed
only every ten steps. It looks like a buffer that is filled every step and flushed rarely, but the
pending row is a dict keyed by name: each step's images replace the previous step's under the same
keys, so it holds one step's previews at most, and the commit sends it off and clears it. Bounded.

Real case: wandb/wandb https://github.com/wandb/wandb/issues/554 (maintainer: "If you specify
commit=False we'll 'rollup' the calls to wandb.log and only commit the results in commit=True"), and
the buffered row described in pytorch/torchtitan https://github.com/pytorch/torchtitan/pull/4818.
"""
import torch
from torch import nn

from ._common import seed
from ._wandb_like import Run

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
COMMIT_EVERY = 10


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
    g = seed(554)
    model = SmallUNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    wandb_run = Run()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.rand(8, 3, 64, 64, generator=g)
            noisy = x + 0.1 * torch.randn(8, 3, 64, 64, generator=g)
            out = model(noisy)
            loss = nn.functional.mse_loss(out, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            wandb_run.log({"samples/pred": [to_image(out[k]) for k in range(4)],
                           "samples/target": [to_image(x[k]) for k in range(4)]}, commit=False)
            if step % COMMIT_EVERY == COMMIT_EVERY - 1:
                wandb_run.log({"train/loss": loss.item()}, commit=True)
            tracker.step()
