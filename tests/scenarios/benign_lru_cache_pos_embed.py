"""Sine position embeddings computed by a module-level function wrapped in
``functools.lru_cache(maxsize=4)`` and keyed by the feature shape: with more input sizes than the
cache holds, it keeps evicting and rebuilding entries, and never holds more than four.

Real case: https://github.com/huggingface/transformers/pull/40007 ("Use lru_cache for sine pos
embeddings MaskFormer"; the review: "be very careful about memory here, as I believe those tensors
will never be cleaned up as they reside in the cache!", answered by "We can also decrease lru_cache
max_size to ``1``"). Here the cache is bounded (maxsize 4) and the inputs come in six sizes drawn at
random, so the cache churns: bounded, not a leak.
"""
import functools

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SIZES = (16, 20, 24, 28, 32, 36)


@functools.lru_cache(maxsize=4)
def sine_pos_embed(h, w, dim=8):
    ys = torch.linspace(0, 1, h)[:, None].expand(h, w)
    xs = torch.linspace(0, 1, w)[None, :].expand(h, w)
    freq = torch.arange(1, dim // 4 + 1, dtype=torch.float32) * torch.pi
    parts = [f(c[..., None] * freq) for c in (ys, xs) for f in (torch.sin, torch.cos)]
    return torch.cat(parts, dim=-1).permute(2, 0, 1).contiguous()


class PixelDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        f = torch.relu(self.conv(x))
        f = f + sine_pos_embed(*f.shape[-2:])
        return self.head(f.mean((2, 3)))


def run(tracker_factory, steps=60):
    g = seed(59)
    sine_pos_embed.cache_clear()
    model = PixelDecoder()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            s = SIZES[int(torch.randint(0, len(SIZES), (1,), generator=g))]
            x = torch.randn(16, 3, s, s, generator=g)
            y = torch.randint(0, 4, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
