"""A rotary-embedding table recomputed only when a longer sequence than any before arrives: it
grows to the longest length seen, in ever rarer steps, and is bounded by the model's context.

Real case: the cos/sin caches of rotary embeddings, extended when ``seq_len > seq_len_cached``:
https://github.com/facebookresearch/xformers/issues/728 ("The cached tensors should only be
re-computed if the sequence length is larger than the cached sequence length"),
https://github.com/openai/gpt-oss/pull/43 ("cache updates only when the sequence length
increases") and https://github.com/TransformerLensOrg/TransformerLens/pull/1457 ("lazy extension"
of ``rotary_sin`` / ``rotary_cos``, bounded by ``n_ctx``). Batches come with random lengths up to
the context, so the table grows fast at first, then seldom, then not at all.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
CONTEXT = 96


class Rotary(nn.Module):
    def __init__(self, d=DIM):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d)), persistent=False)
        self.seq_len_cached = 0
        self.register_buffer("cos_cached", torch.empty(0), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        if n > self.seq_len_cached:  # recomputed only for a longer sequence than any before
            t = torch.arange(n, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat([freqs, freqs], dim=-1)
            self.cos_cached, self.sin_cached, self.seq_len_cached = emb.cos(), emb.sin(), n
        cos, sin = self.cos_cached[:n], self.sin_cached[:n]
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()
        self.body = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        return self.body(self.rotary(x)).mean(1)


def run(tracker_factory, steps=30):
    g = seed(34)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            n = int(torch.randint(8, CONTEXT + 1, (1,), generator=g))
            x = torch.randn(16, n, DIM, generator=g)
            y = torch.randint(0, 4, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
