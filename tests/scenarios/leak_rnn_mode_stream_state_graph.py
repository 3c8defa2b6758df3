"""RNN-mode streaming inference with a recurrent (RWKV-style) language model: the server feeds each
incoming chunk of tokens together with the ``state`` the previous chunk returned, so that a long
stream is never re-encoded. The model is in ``eval()`` mode but the loop runs without
``torch.no_grad()`` / ``torch.inference_mode()``: every returned state carries the autograd graph of
its chunk, and that graph points at the previous state's graph. No backward ever runs to free it, so
``stream.state`` (a fixed-size tensor per layer) keeps the graphs of every chunk ever served. The
state's size never changes; only the chain behind it grows.

Real case: huggingface/transformers https://github.com/huggingface/transformers/issues/26588
("RWKV's 'RNN mode' results in unchecked memory growth, causing OOM": the reported loop calls the
model repeatedly and feeds the returned ``state`` into the next call; the GPU goes OOM "very
quickly"), and the same RWKV model's inference growth in
https://github.com/huggingface/transformers/issues/23687.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "state", "top": 1}
VOCAB = 128


class RecurrentLM(nn.Module):
    """A linear-recurrence LM: per layer, state = decay * state + key(x); x += out(state)."""

    def __init__(self, vocab=VOCAB, d=64, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.key = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.decay = nn.Parameter(torch.zeros(layers, d))
        self.head = nn.Linear(d, vocab)

    def initial_state(self, batch):
        return [torch.zeros(batch, self.embed.embedding_dim) for _ in self.key]

    def forward(self, tokens, state):
        state = list(state)
        logits = []
        for t in range(tokens.shape[1]):
            x = self.embed(tokens[:, t])
            for i, (k, o) in enumerate(zip(self.key, self.out)):
                state[i] = torch.sigmoid(self.decay[i]) * state[i] + k(x)
                x = x + o(torch.tanh(state[i]))
            logits.append(self.head(x))
        return torch.stack(logits, 1), state


class StreamSession:
    def __init__(self, model, batch):
        self.model = model
        self.state = model.initial_state(batch)

    def feed(self, tokens):
        # the leak: no torch.no_grad(); the new state keeps this chunk's graph and the old one's
        logits, self.state = self.model(tokens, self.state)
        return logits.argmax(-1)


def run(tracker_factory, steps=30):
    g = seed(2658)
    model = RecurrentLM()
    model.eval()
    stream = StreamSession(model, batch=8)
    transcript = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            chunk = torch.randint(0, VOCAB, (8, 16), generator=g)
            transcript.append(stream.feed(chunk)[:, -1].tolist())
            transcript = transcript[-16:]
            tracker.step()
