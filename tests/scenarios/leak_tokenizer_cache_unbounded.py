"""A serving loop tokenizes each incoming text with a word-piece cache: ``_token_cache`` maps every
text it has seen to its list of token ids (Python ints), never evicted. Incoming texts are nearly
all new, so the cache holds every request's token list for as long as the server runs: host memory
in Python objects (lists of ints), no tensor kept.

Real case: marcelroed/gigatoken https://github.com/marcelroed/gigatoken/issues/36 ("Unbounded cache
growth": "the cache usage is totally unbounded ... Each worker basically just grows forever";
maintainer: "This is a known problem").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "_token_cache", "top": 1}
VOCAB = 30000


class Classifier(nn.Module):
    def __init__(self, vocab=VOCAB, d=64):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, d)
        self.head = nn.Linear(d, 8)

    def forward(self, ids, offsets):
        return self.head(self.embed(ids, offsets))


class Tokenizer:
    def __init__(self):
        self._token_cache = {}

    def encode(self, text):
        ids = self._token_cache.get(text)
        if ids is None:
            ids = [1000 + (hash(w) % (VOCAB - 1000)) for w in text.split()]
            self._token_cache[text] = ids  # the leak: every text ever seen
        return ids


def run(tracker_factory, steps=30):
    g = seed(539)
    model = Classifier().eval()
    tok = Tokenizer()
    labels = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            texts = []
            for r in range(16):
                n = 150
                ws = torch.randint(0, 50000, (n,), generator=g).tolist()
                texts.append(" ".join(f"t{w}" for w in ws))
            encoded = [tok.encode(t) for t in texts]
            offsets = torch.tensor([0] + [len(e) for e in encoded[:-1]]).cumsum(0)
            with torch.inference_mode():
                labels.extend(model(torch.tensor(sum(encoded, [])), offsets).argmax(-1).tolist())
            labels = labels[-64:]
            tracker.step()
