"""A position-embedding cache keyed by the feature map's shape that holds at most eight entries and
evicts the oldest: with multi-scale training it keeps gaining new tensors while old ones leave, and
its size stays bounded, so not a leak.

Real case: the review of https://github.com/roboflow/rf-detr/pull/1416 ("The cache is active while
the module is training, so the default unpadded training path retains up to eight full-batch
position tensors. The PR's own measurements put this at 123.75 MiB for batch 16"): a bounded cache
of position tensors keyed by ``(mask shape, device, ...)``. Here the images come in twelve square
sizes drawn at random, more than the cache holds, so entries are evicted and rebuilt throughout the
run (first in, first out); the embedding is a sine/cosine grid as in DETR.
"""
import math

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
SIZES = tuple(range(12, 60, 4))
MAX_ENTRIES = 8


class SinePositionEmbedding(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.dim = dim
        self._pos_cache = {}

    def build(self, h, w):
        y = torch.arange(h, dtype=torch.float32)[:, None].expand(h, w)
        x = torch.arange(w, dtype=torch.float32)[None, :].expand(h, w)
        freq = 10000 ** (torch.arange(self.dim // 4, dtype=torch.float32) / (self.dim // 4))
        parts = [f(c[..., None] / freq * 2 * math.pi / max(h, w)) for c in (y, x) for f in (torch.sin, torch.cos)]
        return torch.cat(parts, dim=-1).permute(2, 0, 1)

    def forward(self, feats):
        key = tuple(feats.shape[-2:])
        pos = self._pos_cache.get(key)
        if pos is None:
            if len(self._pos_cache) >= MAX_ENTRIES:
                self._pos_cache.pop(next(iter(self._pos_cache)))  # evict the oldest entry
            pos = self._pos_cache[key] = self.build(*key)
        return feats + pos


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Conv2d(3, 16, 3, padding=1)
        self.pos = SinePositionEmbedding(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.pos(torch.relu(self.backbone(x))).mean((2, 3)))


def run(tracker_factory, steps=60):
    g = seed(57)
    model = Detector()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            s = SIZES[int(torch.randint(0, len(SIZES), (1,), generator=g))]
            x = torch.randn(8, 3, s, s, generator=g)
            y = torch.randint(0, 4, (8,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
