"""A text-generation server truncates each completion at the request's stop strings with a regular
expression built per request (``re.search("|".join(map(re.escape, stop)), text)``). Almost every
request brings its own stop strings, so every request compiles a new pattern, and the ``re``
module keeps each compiled pattern in its cache. That cache is bounded: past ``re._MAXCACHE``
entries (512) the oldest are evicted (CPython 3.7+ pops the oldest; 3.12 adds a small LRU in
front). Memory climbs while the cache fills over the first steps, then stays flat, however many
requests are served.

Real case: python/cpython https://github.com/python/cpython/pull/3768 ("bpo-28293: The regex cache
no longer completely dump when full": ``_cache.popitem(False)`` once ``len(_cache) >= _MAXCACHE``)
and https://github.com/python/cpython/pull/96347 (``_MAXCACHE = 512``, a FIFO and an LRU cache),
and the opposite case in mrabarnett/mrab-regex https://github.com/mrabarnett/mrab-regex/issues/387
(large patterns compiled once and thrown away still held by the module's internal cache).
"""
import re

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VOCAB = 512


class TinyLM(nn.Module):
    def __init__(self, vocab=VOCAB, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


def run(tracker_factory, steps=30):
    g = seed(28293)
    model = TinyLM().eval()
    re.purge()  # start from an empty module cache, as a fresh server process does
    done = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            tokens = torch.randint(0, VOCAB, (64, 24), generator=g)
            with torch.inference_mode():
                out = model(tokens).argmax(-1).tolist()
            for r, ids in enumerate(out):
                text = " ".join(f"w{i}" for i in ids)
                # each request's own stop strings (a user id, two words of its prompt, a tool-call marker)
                stop = [f"</user-{step}-{r}>", f"w{ids[3]} w{ids[4]}", f"[[tool:{r * 7919 % 1000}]]"]
                m = re.search("|".join(map(re.escape, stop)), text)
                done.append(text[: m.start()] if m else text)
            done = done[-128:]
            tracker.step()
    re.purge()
