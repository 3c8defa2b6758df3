"""A hand-written copy of an OpenMMLab ``BaseMetric`` (mmengine / mmocr) in a data-parallel run, seen
from rank 1. During validation, ``metric.process(data_batch, data_samples)`` appends each batch's
results (the detached per-character probabilities of a text recognizer) to ``metric.results``;
``metric.evaluate(size)`` collects the results, computes the metric on the main process, and then
clears ``metric.results``, but the clear sits inside the ``if is_main_process():`` branch. On every
other rank the list is never emptied, so each validation round (here every other training step) adds
its predictions to ``metric.results`` for good.

Real case: open-mmlab/mmocr https://github.com/open-mmlab/mmocr/pull/1379 ("[Fix] clear metric.results
only done in main process"), the mmengine ``BaseMetric.results`` contract described in
https://github.com/open-mmlab/mmengine/pull/1062 ("results should be stored in self.results, which will
be used to compute the metrics when all batches have been processed").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "metric.results", "top": 1}

CHARS, SEQ = 40, 25


class Recognizer(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(48, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.dec = nn.Linear(d, CHARS)

    def forward(self, x):  # x: (B, SEQ, 48) column features of a text line
        return self.dec(self.enc(x))


class WordAccuracyMetric:
    def __init__(self, rank):
        self.rank = rank
        self.results = []

    def process(self, data_batch, data_samples):
        for probs, gt in zip(data_samples["char_probs"], data_batch["gt"]):
            self.results.append({"char_probs": probs, "gt": gt})

    def compute_metrics(self, results):
        hits = sum(bool((r["char_probs"].argmax(-1) == r["gt"]).all()) for r in results)
        return {"word_acc": hits / max(len(results), 1)}

    def evaluate(self, size):
        results = self.results  # collect_results(): nothing to gather in this single-process copy
        metrics = None
        if self.rank == 0:
            metrics = self.compute_metrics(results)
            self.results.clear()  # the bug: only the main process clears its results
        return metrics


def run(tracker_factory, steps=30):
    g = seed(634)
    model = Recognizer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    metric = WordAccuracyMetric(rank=1)
    val_interval, val_batches = 2, 2
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x = torch.randn(16, SEQ, 48, generator=g)
            y = torch.randint(0, CHARS, (16, SEQ), generator=g)
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % val_interval == 0:
                model.eval()
                with torch.no_grad():
                    for _ in range(val_batches):
                        vx = torch.randn(16, SEQ, 48, generator=g)
                        vy = torch.randint(0, CHARS, (16, SEQ), generator=g)
                        probs = model(vx).softmax(-1)
                        metric.process({"gt": vy}, {"char_probs": probs})
                metric.evaluate(size=val_batches * 16)
                model.train()
            tracker.step()
