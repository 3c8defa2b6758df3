"""The twin of ``benign_prompt_embed_cache_saturating``: the text encoder's output is cached per
caption, but the captions are augmented by shuffling their tags (a common text-to-image training
trick), so nearly every caption is new and the cache gains an entry for almost every sample: it
grows for as long as the run lasts.

Real case: https://github.com/bghira/SimpleTuner/pull/243 ("bugfix: ever-increasing vram consumed
by text embed caching"); the cache is the per-prompt one of
https://github.com/huggingface/diffusers/issues/10078.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "cache.embeds", "top": 1}
TAGS = [f"tag{i}" for i in range(12)]
PER_STEP = 2


class TextEncoder(nn.Module):
    """Frozen: a caption's embedding is 64 tokens x 128 features (32 KiB)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(len(TAGS), 64 * 128)
        self.requires_grad_(False)

    def forward(self, caption: str) -> torch.Tensor:
        ids = torch.tensor([TAGS.index(t) for t in caption.split(", ")])
        return self.table(ids).mean(0).view(64, 128)


class PromptCache:
    def __init__(self, encoder: TextEncoder):
        self.encoder, self.embeds = encoder, {}

    def get(self, caption: str) -> torch.Tensor:
        if caption not in self.embeds:  # a shuffled caption is a new key: the cache never fills
            with torch.no_grad():
                self.embeds[caption] = self.encoder(caption)
        return self.embeds[caption]


def run(tracker_factory, steps=40):
    g = seed(89)
    cache = PromptCache(TextEncoder())
    model = nn.Sequential(nn.Linear(128 + 16, 64), nn.ReLU(), nn.Linear(64, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            captions = [", ".join(TAGS[i] for i in torch.randperm(len(TAGS), generator=g)[:6]) for _ in range(PER_STEP)]
            text = torch.stack([cache.get(c).mean(0) for c in captions])
            noise = torch.randn(PER_STEP, 16, generator=g)
            loss = nn.functional.mse_loss(model(torch.cat([text, noise], 1)), noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
