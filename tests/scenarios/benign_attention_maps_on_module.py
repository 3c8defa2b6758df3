"""Explainability hooks on a transformer block: each forward keeps its attention map on the module
(``self.attn_map = attn``) and a tensor hook saves the map's gradient (``self.attn_grad``). Both
are replaced by the next forward: one step's map and gradient, never more.

Real case: the Transformer-Explainability pattern, https://github.com/hila-chefer/Transformer-MM-Explainability/issues/13
(``def save_attn_gradients(self, attn_gradients): self.attn_gradients = attn_gradients`` and
``register_hook(self.save_attn_gradients)`` in the layer's forward) and
https://github.com/hila-chefer/Transformer-MM-Explainability/issues/3 (``grad = blk.attn_grad``,
``cam = blk.attn_probs`` read off every block). The maps keep their step's autograd node, but
each new step drops the previous one.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ExplainedAttention(nn.Module):
    def __init__(self, d=DIM, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.attn_map = None
        self.attn_grad = None

    def save_attn_gradients(self, grad):
        self.attn_grad = grad

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        self.attn_map = attn  # replaced by the next forward
        if attn.requires_grad:
            attn.register_hook(self.save_attn_gradients)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([ExplainedAttention() for _ in range(2)])
        self.head = nn.Linear(DIM, 4)

    def forward(self, x):
        for blk in self.blocks:
            x = x + blk(x)
        return self.head(x.mean(1))


def run(tracker_factory, steps=30):
    g = seed(46)
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(16, 24, DIM, generator=g)
            y = torch.randint(0, 4, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            cams = [(blk.attn_grad * blk.attn_map).clamp(min=0).mean(1) for blk in model.blocks]
            del cams
            tracker.step()
