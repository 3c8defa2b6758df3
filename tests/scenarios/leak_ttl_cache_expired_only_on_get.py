"""An embedding service caches each query's embedding for a while (a hand-rolled TTL cache,
``embed_cache``): entries carry an expiry time, and ``get()`` drops an entry it finds expired. But
an entry is only ever checked when its own key is looked up again, and most queries are never
repeated: their expired entries (a tensor each) stay in ``embed_cache._entries`` for as long as the
service runs. The clock is the request counter (a logical clock), so the loop is deterministic.

Real case: cpsubrian/node-stow https://github.com/cpsubrian/node-stow/pull/3 ("The memory backend
checks the ttl on get, but it fails to remove it from the cache. So even if you use a ttl, the
memory cache will grow to Infinity"), pymedusa/Medusa https://github.com/pymedusa/Medusa/pull/12222
("The TTL cache retained every expired key indefinitely") and ttlequals0/MinusPod
https://github.com/ttlequals0/MinusPod/issues/621 ("Since expired entries are only evicted on
access, the cache dict grows unbounded").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "embed_cache", "top": 1}
VOCAB = 1000


class Encoder(nn.Module):
    def __init__(self, vocab=VOCAB, d=128):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, d)
        self.proj = nn.Linear(d, d)

    def forward(self, ids):
        return self.proj(self.embed(ids))


class TTLCache:
    def __init__(self, ttl):
        self.ttl = ttl
        self._entries = {}  # key -> (expires_at, value)

    def get(self, key, now):
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] <= now:
            del self._entries[key]  # only the key looked up is ever expired
            return None
        return hit[1]

    def put(self, key, value, now):
        self._entries[key] = (now + self.ttl, value)  # the leak: nothing sweeps the other keys


def run(tracker_factory, steps=30):
    g = seed(12222)
    model = Encoder().eval()
    embed_cache = TTLCache(ttl=48)
    clock = 0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            for r in range(32):
                clock += 1
                # a few popular queries repeat; the long tail never does
                if int(torch.randint(0, 8, (1,), generator=g)) == 0:
                    key = ("popular", int(torch.randint(0, 16, (1,), generator=g)))
                else:
                    key = ("q", step, r)
                vec = embed_cache.get(key, clock)
                if vec is None:
                    ids = torch.randint(0, VOCAB, (1, 12), generator=g)
                    with torch.inference_mode():
                        vec = model(ids)[0].clone()
                    embed_cache.put(key, vec, clock)
            tracker.step()
