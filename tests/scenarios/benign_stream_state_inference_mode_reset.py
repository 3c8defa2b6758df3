"""RNN-mode streaming inference done right: each chunk runs under ``torch.inference_mode()``, so the
carried ``state`` is plain data with no graph, and a stream's state is replaced by a fresh zero
state when its utterance ends (every few chunks). Memory is one fixed-size state per layer whatever
the stream's length; a naive look at "a tensor kept across steps and fed back in" suggests the
RNN-mode growth of the case below, but nothing accumulates.

Real case: the fix for the growth in https://github.com/huggingface/transformers/issues/26588 (RWKV
"RNN mode" memory growth when the state is fed back across calls) is to run the recurrent calls
without autograd; and https://github.com/langchain-ai/langchain/pull/2565 ("RWKV: do not propagate
model_state between calls": the state is reset for each new invocation).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
VOCAB = 128


class RecurrentLM(nn.Module):
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
        self.batch = batch
        self.state = model.initial_state(batch)

    def feed(self, tokens, end_of_utterance):
        with torch.inference_mode():
            logits, self.state = self.model(tokens, self.state)
        if end_of_utterance:
            self.state = self.model.initial_state(self.batch)
        return logits.argmax(-1)


def run(tracker_factory, steps=30):
    g = seed(2659)
    model = RecurrentLM()
    model.eval()
    stream = StreamSession(model, batch=8)
    transcript = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            chunk = torch.randint(0, VOCAB, (8, 16), generator=g)
            transcript.append(stream.feed(chunk, end_of_utterance=step % 5 == 4)[:, -1].tolist())
            transcript = transcript[-16:]
            tracker.step()
