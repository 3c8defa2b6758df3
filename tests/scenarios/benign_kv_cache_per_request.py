"""Greedy generation one token per step: the KV cache grows with every token of a request and is
dropped when the request ends. Memory climbs within each request and falls back at its end.

Real case: https://github.com/huggingface/transformers/issues/28707 (maintainer: "in the case of
generation, you're making autoregressive calls to the model i.e. the model is being repeatedly
called with an increasing input length") and https://github.com/RVC-Boss/GPT-SoVITS/issues/1218
(memory growth during normal inference answered as expected, a consequence of the transformer's
KV cache). A serving loop calls ``decode_step`` once per
token for the active request; requests end at an end token or at their length limit, and the next
request starts with an empty cache. Bounded by the longest request, however long the server runs.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
MAX_NEW = 6


class TinyDecoder(nn.Module):
    def __init__(self, vocab=64, d=DIM, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, past=None):
        h = self.embed(tokens)
        new_past = []
        for i, qkv in enumerate(self.qkv):
            q, k, v = qkv(h).chunk(3, dim=-1)
            if past is not None:
                k, v = torch.cat([past[i][0], k], 1), torch.cat([past[i][1], v], 1)
            att = torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, -1)
            h = h + att @ v
            new_past.append((k, v))
        return self.head(h[:, -1]), tuple(new_past)


class Request:
    def __init__(self, prompt, limit):
        self.prompt, self.limit = prompt, limit
        self.past, self.tokens = None, []


def decode_step(model, req):
    """One token for the request; True when the request is finished."""
    with torch.inference_mode():
        inp = req.prompt if req.past is None else req.tokens[-1]
        logits, req.past = model(inp, req.past)
    req.tokens.append(logits.argmax(-1, keepdim=True))  # one new token per sequence
    return len(req.tokens) >= req.limit


def run(tracker_factory, steps=30):
    g = seed(49)
    model = TinyDecoder()
    model.eval()
    served = []
    req = None
    with tracker_factory(model) as tracker:
        for step in range(steps):
            if req is None:
                limit = int(torch.randint(2, MAX_NEW + 1, (1,), generator=g))
                req = Request(torch.randint(0, 64, (4, 32), generator=g), limit)
            if decode_step(model, req):
                served.append(torch.cat(req.tokens, 1).tolist())
                req = None  # the cache goes with the finished request
            tracker.step()
