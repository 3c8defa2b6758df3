"""A tiny causal decoder with a ``DynamicCache``-like KV cache (used by the prompt-cache scenarios)."""
import torch
from torch import nn


class DynamicCache:
    """Per-layer key/value tensors, grown with ``torch.cat`` on every ``update`` (as transformers'
    ``DynamicCache`` does): the cache object stays the same, its tensors are replaced by longer ones."""

    def __init__(self):
        self.key_cache, self.value_cache = [], []

    def update(self, k, v, layer):
        if len(self.key_cache) <= layer:
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[layer] = torch.cat([self.key_cache[layer], k], dim=1)
            self.value_cache[layer] = torch.cat([self.value_cache[layer], v], dim=1)
        return self.key_cache[layer], self.value_cache[layer]

    def get_seq_length(self):
        return self.key_cache[0].shape[1] if self.key_cache else 0


class CausalLM(nn.Module):
    def __init__(self, vocab=96, d=64, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, past_key_values):
        h = self.embed(tokens)
        for i, qkv in enumerate(self.qkv):
            q, k, v = qkv(h).chunk(3, dim=-1)
            k, v = past_key_values.update(k, v, i)
            att = torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, -1)
            h = h + att @ v
        return self.head(h[:, -1])

    def generate(self, tokens, past_key_values, max_new_tokens=8):
        logits = self(tokens, past_key_values)
        out = [int(logits.argmax(-1)[0])]
        for _ in range(max_new_tokens - 1):
            logits = self(torch.tensor([[out[-1]]]), past_key_values)
            out.append(int(logits.argmax(-1)[0]))
        return out
