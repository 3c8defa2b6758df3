"""A small TTS-vocoder-like 1-D conv stack with every conv wrapped in
``torch.nn.utils.parametrizations.weight_norm`` (the weight is recomputed from ``original0``/
``original1`` on every access). The parametrization creates the weight anew each forward and frees
it with the step's graph: memory is flat.

Real case: "WeightNorm causes Memory Leak" https://github.com/pytorch/pytorch/issues/73481
(HiFi-GAN-style ``weight_norm(Conv1d(...))`` blocks; "calling modules which contain weight_norm
causes the memory buildup over time"; closed, labelled needs reproduction). A benign check that
the weight-norm parametrization, used as intended, does not look like a leak.
"""
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ResBlock(nn.Module):
    def __init__(self, ch, dilations=(1, 3, 5)):
        super().__init__()
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv1d(ch, ch, 3, dilation=d, padding=d)) for d in dilations)

    def forward(self, x):
        for c in self.convs:
            x = x + c(nn.functional.leaky_relu(x, 0.1))
        return x


def run(tracker_factory, steps=30):
    g = seed(104)
    model = nn.Sequential(weight_norm(nn.Conv1d(1, 16, 7, padding=3)), ResBlock(16), ResBlock(16),
                          weight_norm(nn.Conv1d(16, 1, 7, padding=3)))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            wav = torch.randn(8, 1, 256, generator=g)
            loss = nn.functional.l1_loss(model(wav), wav)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
