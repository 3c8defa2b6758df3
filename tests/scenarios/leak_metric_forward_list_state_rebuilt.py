"""A torchmetrics-style ``AveragePrecision`` (list states ``preds``/``target``) called through
``forward`` every training step to log the batch value: ``ap = self.train_ap(probs, y)``. As
torchmetrics' ``_forward_reduce_state_update`` does, ``forward`` sets the accumulated states aside,
resets, updates with the batch alone, computes the batch value, and then merges: for a list state
the merged state is a *new* list, ``global + local``. So the metric's ``preds`` list is a different
object after every step, one entry longer, holding every batch's scores since the run began; nothing
calls ``reset()``. Growth is in the metric's attribute, whose container is replaced each step.

Real case: Lightning-AI/torchmetrics https://github.com/Lightning-AI/torchmetrics/issues/3294
("Memory Leak in AveragePrecision": ``metric(pred, target)`` in a loop, GPU memory keeps growing,
"This doesn't happen with other metrics (Accuracy and Precision)"), and the forward/update caching
of list states discussed in https://github.com/Lightning-AI/torchmetrics/pull/2493.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "train_ap", "top": 1}


class Metric(nn.Module):
    def __init__(self):
        super().__init__()
        self._defaults = {}

    def add_state(self, name, default):
        self._defaults[name] = default
        setattr(self, name, list(default) if isinstance(default, list) else default.clone())

    def reset(self):
        for name, default in self._defaults.items():
            setattr(self, name, list(default) if isinstance(default, list) else default.clone())

    @torch.no_grad()
    def forward(self, *args):
        global_state = {name: getattr(self, name) for name in self._defaults}
        self.reset()
        self.update(*args)
        batch_val = self.compute()
        for name, g in global_state.items():  # _reduce_states: lists are concatenated into a new list
            local = getattr(self, name)
            setattr(self, name, g + local if isinstance(local, list) else g + local)
        return batch_val


class MultilabelAveragePrecision(Metric):
    def __init__(self):
        super().__init__()
        self.add_state("preds", [])
        self.add_state("target", [])

    def update(self, preds, target):
        self.preds.append(preds.detach())
        self.target.append(target)

    def compute(self):
        p, t = torch.cat(self.preds), torch.cat(self.target).float()
        order = p.argsort(0, descending=True)
        t = t.gather(0, order)
        precision = t.cumsum(0) / torch.arange(1, len(t) + 1).unsqueeze(1)
        return ((precision * t).sum(0) / t.sum(0).clamp(min=1)).mean()


def run(tracker_factory, steps=30):
    g = seed(3294)
    model = MLP(d_in=64, hidden=128, d_out=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_ap = MultilabelAveragePrecision()
    logged = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, _ = batch(g, n=256, d=64)
            y = (torch.rand(256, 16, generator=g) > 0.8).long()
            logits = model(x)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, y.float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            logged.append(float(train_ap(torch.sigmoid(logits), y)))  # the batch value; no reset() anywhere
            tracker.step()
