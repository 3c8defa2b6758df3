"""A custom attention layer that caches its keys on ``self`` every forward (a KV cache left on in training).

Real case: Hugging Face transformers https://github.com/huggingface/transformers/issues/23687
("[RWKV] Inference memory leak unless use_cache=False is specified"): state cached on the
module grows with every call.
"""
import torch
from torch import nn

from ._common import DIM, seed


class CachingAttention(nn.Module):
    def __init__(self, d=DIM):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.cache = []

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        self.cache.append(k)  # the leak: grows every forward, and keeps k's graph
        att = torch.softmax(q @ k.transpose(-1, -2) / k.shape[-1] ** 0.5, dim=-1)
        return att @ v


class Block(nn.Module):
    def __init__(self, d=DIM):
        super().__init__()
        self.attn = CachingAttention(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.blocks[0].attn.forward = self._plain(self.blocks[0].attn)  # only block 1 caches
        self.head = nn.Linear(DIM, 4)

    @staticmethod
    def _plain(attn):
        def forward(x):
            q, k, v = attn.qkv(x).chunk(3, dim=-1)
            return torch.softmax(q @ k.transpose(-1, -2) / k.shape[-1] ** 0.5, dim=-1) @ v
        return forward

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "blocks.1.attn.cache", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(3)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(8, 16, DIM, generator=g)
            y = torch.randint(0, 4, (8,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
