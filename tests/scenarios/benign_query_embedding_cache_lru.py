"""The fix of ``leak_query_embedding_cache_unbounded``: the query-embedding cache is an LRU
(``OrderedDict`` with ``move_to_end`` and ``popitem(last=False)``) with a capacity of 96 entries.
Eight new queries a step fill it in twelve steps; from then on each new entry evicts the least
recently used one, so it stays at 96 embeddings for the rest of the run.

Real case: https://github.com/deadbits/vector-embedding-api/issues/1 ("Improve cache: LRU cache,
set max cache size") and https://github.com/danny-avila/rag_api/pull/132 ("Implement LRU caching
for query embedding").
"""
import collections

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class TextEncoder(nn.Module):
    def __init__(self, vocab=4096, d=384):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d)

    def forward(self, ids):
        return nn.functional.normalize(self.proj(self.embed(ids).mean(0)), dim=-1)


class EmbeddingService:
    def __init__(self, encoder, capacity=96):
        self.encoder = encoder
        self.capacity = capacity
        self._embedding_cache = collections.OrderedDict()

    def _tokenize(self, text):
        return torch.tensor([hash(w) % 4096 for w in text.split()])

    def embed(self, text):
        if text in self._embedding_cache:
            self._embedding_cache.move_to_end(text)
            return self._embedding_cache[text]
        with torch.inference_mode():
            vec = self.encoder(self._tokenize(text))
        self._embedding_cache[text] = vec
        if len(self._embedding_cache) > self.capacity:
            self._embedding_cache.popitem(last=False)
        return vec


def run(tracker_factory, steps=30):
    g = seed(533)
    encoder = TextEncoder().eval()
    service = EmbeddingService(encoder)
    corpus = torch.randn(1000, 384, generator=g)
    words = [f"w{i}" for i in range(500)]
    with tracker_factory(encoder) as tracker:
        for step in range(steps):
            for r in range(8):
                idx = torch.randint(0, len(words), (12,), generator=g).tolist()
                q = " ".join(words[i] for i in idx)
                top = (corpus @ service.embed(q)).topk(5).indices.tolist()
            tracker.step()
