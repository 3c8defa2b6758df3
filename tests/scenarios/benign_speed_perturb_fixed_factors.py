"""A keyword-spotting model trained with on-the-fly speed perturbation, done the way lhotse's
recipes do it: the factor is drawn from a fixed set (0.9, 1.0, 1.1), so the module-level
``_precompiled_resamplers`` dict, keyed by ``(source_rate, target_rate)``, gains the three
resamplers it needs (one per factor; 1.0 resamples to the same rate and builds a one-row bank)
during the first steps and is only read after that. A cache of sinc filter banks filled at the
start of training looks like growth, but it is bounded by the set of factors.

Real case: lhotse-speech/lhotse https://github.com/lhotse-speech/lhotse/issues/1333 (memory grew
with ``perturb_speed(rng.uniform(0.9, 1.1))`` and stopped growing once that line was changed) and
https://github.com/lhotse-speech/lhotse/pull/657 (resampling transforms kept "in global variable
space", one per rate pair).
"""
import math

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

SR = 16000
WIDTH = 6


class PolyphaseResample(nn.Module):
    """A sinc filter bank with one row per output phase of ``new / gcd(orig, new)``."""

    def __init__(self, orig, new):
        super().__init__()
        gcd = math.gcd(orig, new)
        self.orig, self.new = orig // gcd, new // gcd
        taps = 2 * WIDTH + 1
        phase = torch.arange(self.new, dtype=torch.float32)[:, None] / self.new
        offs = torch.arange(-WIDTH, WIDTH + 1, dtype=torch.float32)[None, :] - phase
        cutoff = min(1.0, new / orig) * 0.99
        window = torch.cos(offs / (WIDTH + 1) * math.pi / 2) ** 2
        self.register_buffer("kernel", cutoff * torch.sinc(cutoff * offs) * window)  # (new', taps)
        self.taps = taps

    def forward(self, wave, out_len):
        smooth = self.kernel.mean(0).view(1, 1, self.taps)
        y = nn.functional.conv1d(wave[:, None], smooth, padding=WIDTH)[:, 0]
        return nn.functional.interpolate(y[:, None], size=out_len, mode="linear", align_corners=False)[:, 0]


_precompiled_resamplers = {}


def get_or_create_resampler(orig, new):
    key = (orig, new)
    if key not in _precompiled_resamplers:  # one filter bank per rate pair: three pairs here
        _precompiled_resamplers[key] = PolyphaseResample(orig, new)
    return _precompiled_resamplers[key]


def perturb_speed(wave, factor):
    new_sr = int(round(SR / factor))
    out_len = int(round(wave.shape[1] * new_sr / SR))
    return get_or_create_resampler(SR, new_sr)(wave, out_len)


class KeywordNet(nn.Module):
    def __init__(self, n_fft=256, classes=10):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        self.conv = nn.Conv1d(n_fft // 2 + 1, 64, 3, padding=1)
        self.head = nn.Linear(64, classes)

    def forward(self, wave):
        spec = torch.stft(wave, self.n_fft, hop_length=128, window=self.window, return_complex=True).abs()
        h = torch.relu(self.conv(torch.log1p(spec)))
        return self.head(h.mean(-1))


def run(tracker_factory, steps=30):
    g = seed(4110)
    _precompiled_resamplers.clear()
    model = KeywordNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                wave = torch.randn(16, SR // 2, generator=g)
                factor = (0.9, 1.0, 1.1)[int(torch.randint(0, 3, (1,), generator=g))]  # three fixed factors
                wave = perturb_speed(wave, factor)
                y = torch.randint(0, 10, (16,), generator=g)
                loss = nn.functional.cross_entropy(model(wave), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        _precompiled_resamplers.clear()
