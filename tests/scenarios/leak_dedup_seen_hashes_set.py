"""A streaming data pipeline drops exact-duplicate documents before tokenizing them for the
model: it hashes each document's normalized text and keeps every digest it has seen in a Python
``set`` (``seen_hashes``) for the whole run. Almost every document is new, so the set gains one
hex-digest string per document, for ever: host memory in Python objects, no tensor kept.

Real case: comet-ml/opik https://github.com/comet-ml/opik/pull/8273 (the dataset's dedup keeps
``self._hashes.add(item_hash)`` for every item; the author: "You are right that process memory
grows O(N)"), and togethercomputer/RedPajama-Data
https://github.com/togethercomputer/RedPajama-Data/issues/115 ("wouldn't there be a large
memory-overhead to load all previous text hashes in the memory?"; they used a Bloom filter
instead).
"""
import hashlib

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "seen_hashes", "top": 1}
VOCAB = 2048


class BagClassifier(nn.Module):
    def __init__(self, vocab=VOCAB, d=32):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, d)
        self.head = nn.Linear(d, 4)

    def forward(self, ids, offsets):
        return self.head(self.embed(ids, offsets))


def documents(g, n):
    for _ in range(n):
        words = torch.randint(0, 50000, (16,), generator=g).tolist()
        yield " ".join(f"tok{w}" for w in words)


def run(tracker_factory, steps=30):
    g = seed(8273)
    model = BagClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    seen_hashes = set()  # the leak: every digest ever seen
    kept = dropped = 0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            batch_ids, offsets = [], []
            for doc in documents(g, 512):
                h = hashlib.sha256(" ".join(doc.lower().split()).encode()).hexdigest()
                if h in seen_hashes:
                    dropped += 1
                    continue
                seen_hashes.add(h)
                kept += 1
                offsets.append(sum(len(b) for b in batch_ids))
                batch_ids.append([hash(w) % VOCAB for w in doc.split()])
            ids = torch.tensor([t for b in batch_ids for t in b])
            y = torch.randint(0, 4, (len(batch_ids),), generator=g)
            loss = nn.functional.cross_entropy(model(ids, torch.tensor(offsets)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
