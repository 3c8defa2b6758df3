"""A tokenizer with a word cache of fixed capacity, the way the Rust BPE model of Hugging Face
``tokenizers`` bounds its cache: a word's pieces are cached while the cache has room, and once it
holds ``capacity`` entries new words are still tokenized but no longer stored. The corpus is text
with a long-tailed vocabulary, so the first steps bring hundreds of new words each and the cache
grows by tens of KiB a step for the first dozen steps; then it is full and memory is flat. Early
steps look like a growing cache; the cap makes it a warm-up.

Real case: huggingface/tokenizers https://github.com/huggingface/tokenizers/issues/1539 ("Memory
leak for large strings": "This is actually most probably related to the ``cache_capacity``") and
https://github.com/huggingface/tokenizers/issues/1680 ("We added a BPE cache capacity
``DEFAULT_CACHE_CAPACITY`` is 10K"). Benign twin of leak_tokenizer_cache_unbounded.
"""

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VOCAB_IDS = 4096


class CappedWordCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.words = {}

    def get(self, word):
        pieces = self.words.get(word)
        if pieces is None:
            pieces = [hash(word[i : i + 3]) % VOCAB_IDS for i in range(0, len(word), 3)]
            if len(self.words) < self.capacity:  # full: tokenize, but do not store
                self.words[word] = pieces
        return pieces


class BagClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB_IDS, 64, mode="mean")
        self.head = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))

    def forward(self, ids, offsets):
        return self.head(self.embed(ids, offsets))


def sentences(g, n, words_per, syllables):
    # a long-tailed vocabulary: word ranks drawn from a heavy-tailed distribution over 200k words
    ranks = (torch.rand(n, words_per, generator=g) ** 3 * 200_000).long().tolist()
    out = []
    for row in ranks:
        out.append(" ".join(syllables[r % 97] + syllables[(r // 97) % 89] + f"{r:x}" for r in row))
    return out


def run(tracker_factory, steps=30):
    g = seed(5705)
    syllables = ["".join(chr(97 + (i * 7 + j) % 26) for j in range(2 + i % 3)) for i in range(100)]
    model = BagClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    cache = CappedWordCache(capacity=8000)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            texts = sentences(g, 32, 24, syllables)
            ids, offsets = [], []
            for text in texts:
                offsets.append(len(ids))
                for word in text.split():
                    ids.extend(cache.get(word))
            y = torch.randint(0, 4, (len(texts),), generator=g)
            logits = model(torch.tensor(ids), torch.tensor(offsets))
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
