"""A pytorch-pfn-extras-style reporter: the training step reports its loss
(``reporter.report({"main/loss": loss})``) and a ``LogReport``-like extension folds every observation
into a running ``Summary`` (``_x += value``, ``_x2 += value * value``) that it writes out and resets at
its trigger, once an epoch. The reporter stores ``value.clone()`` instead of ``value.detach()``: a
clone keeps the autograd graph, so the running sums become a chain through every reported loss's
graph, with the activations each one saved for backward. With epochs longer than the run, the
summary is never reset and keeps every step's graph.

Real case: pfnet/pytorch-pfn-extras https://github.com/pfnet/pytorch-pfn-extras/pull/49 ("Use detach
instead of clone to avoid retention of computational graph in reporter": "This fixes a memory leak
that happens due to the reporter retaining the computational graph associated with the reported
Tensor"), and the same in fairseq's logging outputs, https://github.com/facebookresearch/fairseq/issues/2255.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "_summaries", "top": 1}
ITERS_PER_EPOCH = 1000


class Summary:
    def __init__(self):
        self._x, self._x2, self._n = 0.0, 0.0, 0

    def add(self, value):
        self._x += value
        self._x2 += value * value
        self._n += 1

    def compute_mean(self):
        return float(self._x) / self._n


class DictSummary:
    def __init__(self):
        self._summaries = {}

    def add(self, d):
        for k, v in d.items():
            self._summaries.setdefault(k, Summary()).add(v)


class LogReport:
    def __init__(self, every):
        self.every = every
        self._summary = DictSummary()
        self.log = []

    def __call__(self, iteration, observation):
        self._summary.add(observation)
        if iteration % self.every == self.every - 1:
            self.log.append({k: s.compute_mean() for k, s in self._summary._summaries.items()})
            self._summary = DictSummary()


class Reporter:
    def __init__(self):
        self.observation = {}

    def report(self, values):
        for k, v in values.items():
            self.observation[k] = v.clone() if torch.is_tensor(v) else v  # the leak: should be v.detach()


def run(tracker_factory, steps=30):
    g = seed(49)
    model = MLP(d_in=64, hidden=256, d_out=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    reporter, log_report = Reporter(), LogReport(every=ITERS_PER_EPOCH)
    with tracker_factory(model, optimizer=opt) as tracker:
        for it in range(steps):
            reporter.observation = {}
            x, y = batch(g, n=256, d=64, classes=10)
            loss = nn.functional.cross_entropy(model(x), y)
            reporter.report({"main/loss": loss})
            opt.zero_grad()
            loss.backward()
            opt.step()
            log_report(it, reporter.observation)
            tracker.step()
