"""A retrieval-augmented trainer keeps the last embeddings it produced (detached, 8 per step, 512
floats each) as extra negatives in ``trainer.context.history``. To avoid trimming on every step it
trims with hysteresis: only when the history exceeds ``MAX_HISTORY + TRIM_HYSTERESIS`` (100 + 20)
entries is it cut back to the newest ``MAX_HISTORY``. The history grows for the first 15 steps,
then saw-tooths between 100 and 120 entries forever: bounded.

Real case: SciLink "Derive the history-trim trigger from MAX_HISTORY_MESSAGES"
https://github.com/ziatdinovmax/SciLink/pull/514 (the trim fires at cap + hysteresis and keeps the
cap, an intended sawtooth), and https://github.com/KanishJebaMathewM/Truxify/pull/4470 (a list
capped by periodic slicing).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
MAX_HISTORY = 100
TRIM_HYSTERESIS = 20


class Context:
    def __init__(self):
        self.history = []

    def add(self, emb):
        self.history.extend(emb.detach().unbind(0))
        if len(self.history) > MAX_HISTORY + TRIM_HYSTERESIS:
            self.history = self.history[-MAX_HISTORY:]

    def negatives(self):
        return torch.stack(self.history) if self.history else None


class Trainer:
    def __init__(self):
        self.context = Context()


def run(tracker_factory, steps=30):
    g = seed(307)
    enc = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 512))
    opt = torch.optim.SGD(enc.parameters(), lr=0.01)
    trainer = Trainer()
    with tracker_factory(enc, optimizer=opt) as tracker:
        for step in range(steps):
            q = nn.functional.normalize(enc(torch.randn(8, 64, generator=g)), dim=-1)
            k = nn.functional.normalize(enc(torch.randn(8, 64, generator=g)), dim=-1)
            neg = trainer.context.negatives()
            logits = q @ (k.T if neg is None else torch.cat([k, neg]).T)
            loss = nn.functional.cross_entropy(logits / 0.1, torch.arange(8))
            opt.zero_grad()
            loss.backward()
            opt.step()
            trainer.context.add(k)
            tracker.step()
