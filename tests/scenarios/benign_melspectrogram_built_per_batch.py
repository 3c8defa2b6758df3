"""An audio classifier whose data transform builds a new ``MelSpectrogram`` module (with its mel
filterbank and window registered as buffers) for every batch, applies it, and drops it. Each step
allocates a new filterbank and window and frees the previous ones when the transform returns: new
modules with new buffers appear every step, but none survives the step; memory is flat.

Real case: facebookresearch/WavAugment https://github.com/facebookresearch/WavAugment/issues/8
("Leaking memory during training": the reporter traced the growth to "a 'transform' function that
initialized a new MelSpectrogramm each time", and creating it once fixed their run); here the
per-batch module is released properly, the pattern that looks like the leak but is not one.
"""
import math

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

SR, N_FFT, HOP, N_MELS = 16000, 400, 160, 64


def mel_filterbank(n_freqs, n_mels, sr):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    freqs = torch.linspace(0, sr / 2, n_freqs)
    lower = (freqs[None] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - freqs[None]) / (hz[2:, None] - hz[1:-1, None])
    return torch.clamp(torch.minimum(lower, upper), min=0.0).T  # (n_freqs, n_mels)


class MelSpectrogram(nn.Module):
    def __init__(self, sr=SR, n_fft=N_FFT, hop=HOP, n_mels=N_MELS):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", mel_filterbank(n_fft // 2 + 1, n_mels, sr))

    def forward(self, wave):
        spec = torch.stft(wave, self.n_fft, self.hop, window=self.window, return_complex=True).abs().pow(2)
        return spec.transpose(-1, -2) @ self.fb


def transform(waves):
    mel = MelSpectrogram()  # built per batch, as in the report; released when this returns
    return torch.log(mel(waves) + 1e-6).unsqueeze(1)


class AudioCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x)


def run(tracker_factory, steps=30):
    g = seed(8)
    model = AudioCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            waves = torch.randn(8, SR, generator=g) * 0.1
            labels = torch.randint(0, 10, (8,), generator=g)
            feats = transform(waves)
            loss = nn.functional.cross_entropy(model(feats), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
