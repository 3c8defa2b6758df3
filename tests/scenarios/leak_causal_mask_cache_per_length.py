"""An attention layer caches its causal mask in a dict keyed by (query length, key length) and
never evicts. Its keys are lengths that move around during a run, and every new pair mints a
length pair: variable-length batches bring a length not seen before on nearly every step, so the
cache gains a mask on nearly every step.

Real case: https://github.com/CanReader/FastNN/issues/16 ("The causal mask cache grows without
bound ... Entries go in and never come out. The key includes ``q_len`` and ``kv_len``, both of
which move around during a run ... incremental decoding, where a multi token prefill at each new
context length mints a brand new ``[lanes, q_len, kv_len]`` mask"; that library is in Rust) and
the same review finding on a PyTorch model in https://github.com/LibreYOLO/libreyolo/pull/541
("Unbounded positional-embedding cache ... ``_pos_embed_cache`` is never evicted"). Here the cache
is a Python dict on the attention module of a small causal language model, trained on batches
whose sequence length is drawn each step from 16 to 383 tokens (no bucketing).
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "_mask_cache", "top": 1}


class CachedMaskAttention(nn.Module):
    def __init__(self, d=DIM, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self._mask_cache = {}

    def causal_mask(self, q_len, kv_len):
        key = (q_len, kv_len)
        if key not in self._mask_cache:  # the leak: one mask per length pair, never evicted
            full = torch.ones(q_len, kv_len, dtype=torch.bool).triu(kv_len - q_len + 1)
            self._mask_cache[key] = torch.zeros(q_len, kv_len).masked_fill(full, float("-inf"))
        return self._mask_cache[key]

    def forward(self, x):
        mask = self.causal_mask(x.shape[1], x.shape[1])
        out, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False)
        return out


class CausalLM(nn.Module):
    def __init__(self, vocab=64, d=DIM):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layer = CachedMaskAttention(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.layer(self.embed(tokens)))


def run(tracker_factory, steps=30):
    g = seed(53)
    model = CausalLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            length = int(torch.randint(16, 384, (1,), generator=g))
            tokens = torch.randint(0, 64, (4, length + 1), generator=g)
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
