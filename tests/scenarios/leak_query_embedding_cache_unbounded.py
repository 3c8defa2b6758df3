"""An embedding service (the query side of a RAG pipeline) caches each query's embedding in a plain
dict keyed by the query text, "to save calls in reflexion cycles". Queries from users are nearly
all distinct, so the cache gains an entry for almost every request and never evicts one: a
long-running server keeps every embedding it ever computed.

Real case: https://github.com/CLoaKY233/Multi-cycle-RAG/pull/4 (review: "Unbounded cache may cause
memory issues in long-running processes. The ``_embedding_cache`` dictionary grows indefinitely
without any eviction policy or size limit") and https://github.com/mastra-ai/mastra/issues/17900
("Memory embedding cache grows without bound").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_embedding_cache", "top": 1}


class TextEncoder(nn.Module):
    def __init__(self, vocab=4096, d=384):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d)

    def forward(self, ids):
        return nn.functional.normalize(self.proj(self.embed(ids).mean(0)), dim=-1)


class EmbeddingService:
    def __init__(self, encoder):
        self.encoder = encoder
        self._embedding_cache = {}  # query text -> embedding, never evicted

    def _tokenize(self, text):
        return torch.tensor([hash(w) % 4096 for w in text.split()])

    def embed(self, text):
        if text in self._embedding_cache:
            return self._embedding_cache[text]
        with torch.inference_mode():
            vec = self.encoder(self._tokenize(text))
        self._embedding_cache[text] = vec
        return vec


def run(tracker_factory, steps=30):
    g = seed(532)
    encoder = TextEncoder().eval()
    service = EmbeddingService(encoder)
    corpus = torch.randn(1000, 384, generator=g)
    words = [f"w{i}" for i in range(500)]
    with tracker_factory(encoder) as tracker:
        for step in range(steps):
            for r in range(8):  # eight user queries a step, nearly all new
                idx = torch.randint(0, len(words), (12,), generator=g).tolist()
                q = " ".join(words[i] for i in idx)
                top = (corpus @ service.embed(q)).topk(5).indices.tolist()
            tracker.step()
