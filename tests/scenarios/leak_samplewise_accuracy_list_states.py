"""A token-tagging model tracks per-sequence accuracy with a torchmetrics-style
``MulticlassAccuracy(num_classes=50, average="macro", multidim_average="samplewise")``, updated every
training step and computed for the log, never reset. It looks like the bounded accuracy metrics
(``multidim_average="global"`` keeps four per-class count tensors summed in place), but with
``samplewise`` the true/false positive/negative counts are kept *per sample*: the states become
lists (``dist_reduce_fx="cat"``) that gain a ``(batch, num_classes)`` tensor each per update, so the
metric holds four count tensors for every sequence it has seen.

Real case: Lightning-AI/torchmetrics https://github.com/Lightning-AI/torchmetrics/issues/1738
("Accuracy calculation blowing up memory use"; "this bug only seems to happen when multi-dim averaging
is set to samplewise"), and the list-state memory notes of
https://github.com/Lightning-AI/torchmetrics/pull/2006.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "seq_accuracy", "top": 1}
C, T, VOCAB = 50, 64, 200


class MulticlassAccuracy(nn.Module):
    def __init__(self, num_classes, average="macro", multidim_average="global"):
        super().__init__()
        self.num_classes, self.average, self.multidim_average = num_classes, average, multidim_average
        if multidim_average == "samplewise":  # per-sample stats: list ("cat") states
            self.tp, self.fp, self.tn, self.fn = [], [], [], []
        else:  # global: summed in place
            for name in ("tp", "fp", "tn", "fn"):
                self.register_buffer(name, torch.zeros(num_classes, dtype=torch.long))

    @torch.no_grad()
    def update(self, preds, target):  # preds, target: (N, T) class ids
        p = nn.functional.one_hot(preds, self.num_classes).bool()
        t = nn.functional.one_hot(target, self.num_classes).bool()
        tp, fp = (p & t).sum(1), (p & ~t).sum(1)  # (N, C)
        fn, tn = (~p & t).sum(1), (~p & ~t).sum(1)
        if self.multidim_average == "samplewise":
            for state, value in ((self.tp, tp), (self.fp, fp), (self.tn, tn), (self.fn, fn)):
                state.append(value)
        else:
            for state, value in ((self.tp, tp), (self.fp, fp), (self.tn, tn), (self.fn, fn)):
                state += value.sum(0)

    def compute(self):
        tp, fn = (torch.cat(self.tp), torch.cat(self.fn)) if isinstance(self.tp, list) else (self.tp, self.fn)
        return (tp / (tp + fn).clamp(min=1)).float().mean()


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64)
        self.mix = nn.Linear(64, 64)
        self.head = nn.Linear(64, C)

    def forward(self, tokens):
        return self.head(torch.relu(self.mix(self.embed(tokens))))


def run(tracker_factory, steps=30):
    g = seed(1738)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    seq_accuracy = MulticlassAccuracy(C, average="macro", multidim_average="samplewise")
    logged = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            tokens = torch.randint(0, VOCAB, (32, T), generator=g)
            tags = tokens % C
            logits = model(tokens)
            loss = nn.functional.cross_entropy(logits.reshape(-1, C), tags.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            seq_accuracy.update(logits.argmax(-1), tags)  # never reset
            if step % 10 == 9:
                logged.append(seq_accuracy.compute().item())
            tracker.step()
