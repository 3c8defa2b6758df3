"""An evaluator that keeps one record per sample, a dict with the sample's id, the decoded
prediction (a string), its label and its score, for every batch of the run: plain Python data, no
tensor, that piles up in host memory step after step.

Real case: https://github.com/Aleph-Alpha/intelligence-layer-sdk/pull/108 ("Do not keep all
evaluations in mem") and https://github.com/openvinotoolkit/open_model_zoo/pull/470 ("do not store
annotation and predictions if they is not used for metric evaluation ... can reduce memory
consumption"): per-sample results kept in a list until the end, where a running metric would do.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "evaluator.records", "top": 1}
VOCAB = [f"token_{i:03d}" for i in range(64)]


class Evaluator:
    def __init__(self):
        self.records = []
        self.seen = 0

    def add(self, logits, labels):
        top = logits.topk(4, dim=-1)
        for ids, scores, label in zip(top.indices.tolist(), top.values.tolist(), labels.tolist()):
            self.records.append({  # the leak: one dict per sample, for the whole run
                "id": f"sample-{self.seen:07d}",
                "text": " ".join(VOCAB[i] for i in ids),
                "label": label,
                "score": scores[0],
                "correct": ids[0] == label,
            })
            self.seen += 1


def run(tracker_factory, steps=30):
    g = seed(72)
    model = MLP(hidden=128, d_out=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    evaluator = Evaluator()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=256, classes=64)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            evaluator.add(logits.detach(), y)
            tracker.step()
