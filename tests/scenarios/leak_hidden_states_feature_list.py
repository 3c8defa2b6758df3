"""Feature extraction under ``torch.no_grad()`` that keeps every batch's ``hidden_states`` tuple.

Real case: https://github.com/huggingface/transformers/issues/24315 (DistilBERT used for
inference: "the issue happened with ``hidden_states_list.append(hidden_states)`` ... the GPU memory
accumulates for each batch") and https://github.com/huggingface/transformers/issues/2595 ("RAM
leakage when trying to retrieve the hidden states from the GPT-2 model" in a loop). No graph is
built, but each kept tuple holds one activation tensor per layer for the whole batch, and the list
is never written out nor cleared.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "hidden_states_list", "top": 1}


class Encoder(nn.Module):
    """A small encoder whose forward returns the last state and every layer's hidden state."""

    def __init__(self, vocab=64, d=DIM, layers=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()) for _ in range(layers))

    def forward(self, tokens):
        h = self.embed(tokens)
        hidden_states = (h,)
        for layer in self.layers:
            h = h + layer(h)
            hidden_states += (h,)
        return h, hidden_states


def extract(model, tokens):
    with torch.no_grad():
        _, hidden_states = model(tokens)
    return hidden_states


def run(tracker_factory, steps=30):
    g = seed(47)
    model = Encoder()
    model.eval()
    hidden_states_list = []
    pooled = []
    with tracker_factory(model) as tracker:
        for step in range(steps):
            tokens = torch.randint(0, 64, (16, 16), generator=g)
            hidden_states = extract(model, tokens)
            pooled.append(float(hidden_states[-1].mean()))
            hidden_states_list.append(hidden_states)  # the leak: every layer's activations, kept
            tracker.step()
