"""An embedding service caches each query's embedding for a while in a TTL cache that sweeps: every
``put()`` first drops the entries whose time is up (they are kept in insertion order, so the
sweep pops from the front until it meets a live one), as ``cachetools.TTLCache`` does at every
mutating operation. Most queries are never repeated, so the cache climbs over the first ``ttl``
requests and then holds about ``ttl`` entries: many tensors kept across steps, but a bounded
number, replaced as fast as they come. The clock is the request counter (a logical clock).

Real case: cachetools https://github.com/tkem/cachetools/issues/177 (the maintainer: expired items
are removed "at the next mutating operation, e.g. ``__setitem__``"), and the fix in
regro/conda-metachannel https://github.com/regro/conda-metachannel/pull/15 ("Here is a fix to
manually remove expired elements").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
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
        self._entries = {}  # key -> (expires_at, value), in insertion order

    def get(self, key, now):
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] <= now:
            del self._entries[key]
            return None
        return hit[1]

    def expire(self, now):
        while self._entries:
            key, (at, _) = next(iter(self._entries.items()))
            if at > now:
                break
            del self._entries[key]

    def put(self, key, value, now):
        self.expire(now)
        self._entries.pop(key, None)  # re-inserted at the end: the order stays by expiry
        self._entries[key] = (now + self.ttl, value)


def run(tracker_factory, steps=30):
    g = seed(12223)
    model = Encoder().eval()
    embed_cache = TTLCache(ttl=256)
    clock = 0
    with tracker_factory(model) as tracker:
        for step in range(steps):
            for r in range(32):
                clock += 1
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
