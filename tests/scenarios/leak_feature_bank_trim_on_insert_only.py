"""A contrastive trainer's negative bank with a ``max_entries`` cap that is enforced on only one of
its two write paths. Every 6th step the bank is re-ranked (``insert`` keeps entries sorted by
score) and that path trims it back to ``max_entries``; every other step takes the fast ``append``
path, which skips the cap. The re-rank path does evict (as many old keys as it adds, which would
hold the bank at its cap were it the only writer), but the 5 appends of 16 detached 256-d keys in
between are never evicted: each 6-step period the bank ends 80 keys larger than the last.

Real case: PurrDiction "fix: enforce maxEntries on History fast append path"
https://github.com/PurrNet/PurrDiction/pull/32 (only the out-of-order insert path called the
downsize; the fast append path that handles almost every write skipped it, so the history grew
unbounded), and https://github.com/KanishJebaMathewM/Truxify/pull/4470 (periodic trimming with
growth between trims).

``neg``, the bank stacked into one tensor each step, grows with it: at level full the bank is named
first (a holder gaining tensors before a lone tensor as sure of it), at auto, where the bank's
evidence is the survivors' (fewer samples), ``neg`` can come first and the bank second.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "bank.entries", "top": 2}
RERANK_EVERY = 6


class NegativeBank:
    def __init__(self, max_entries=48):
        self.max_entries = max_entries
        self.entries = []  # (score, key)

    def append(self, keys, scores):  # fast path: no trim (the bug)
        self.entries.extend(zip(scores.tolist(), keys.unbind(0)))

    def insert(self, keys, scores):  # re-rank path: make room for the new keys, then sort
        if len(self.entries) + len(keys) > self.max_entries:
            del self.entries[: len(keys)]  # drops as many as it adds: enough only if it were the sole path
        self.entries.extend(zip(scores.tolist(), keys.unbind(0)))
        self.entries.sort(key=lambda e: -e[0])

    def keys(self):
        return torch.stack([k for _, k in self.entries]) if self.entries else None


def run(tracker_factory, steps=30):
    g = seed(403)
    enc = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256))
    opt = torch.optim.SGD(enc.parameters(), lr=0.01)
    bank = NegativeBank()
    with tracker_factory(enc, optimizer=opt) as tracker:
        for step in range(steps):
            q = nn.functional.normalize(enc(torch.randn(16, 64, generator=g)), dim=-1)
            k = nn.functional.normalize(enc(torch.randn(16, 64, generator=g)), dim=-1)
            neg = bank.keys()
            logits = q @ (k.T if neg is None else torch.cat([k, neg[:256]]).T)
            loss = nn.functional.cross_entropy(logits / 0.1, torch.arange(16))
            opt.zero_grad()
            loss.backward()
            opt.step()
            keys = k.detach().clone()
            scores = (q.detach() * keys).sum(-1)
            if (step + 1) % RERANK_EVERY == 0:
                bank.insert(keys, scores)
            else:
                bank.append(keys, scores)
            tracker.step()
