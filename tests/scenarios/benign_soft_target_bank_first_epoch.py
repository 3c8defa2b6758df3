"""Temporal-ensembling style self-distillation: the trainer keeps, for every training sample, an
exponential moving average of the model's softened predictions, in a dict keyed by the sample's
dataset index (``soft_targets[idx]``), and uses it as an extra target once a sample has been seen.
The dataset has 40 batches of 64 samples. During the first epoch each step adds 64 new entries, so
memory grows steadily for 40 steps, like a leak; from the second epoch on every index is already
there and the entries are updated in place: the bank stops at the dataset's size. A run of 60 steps
shows 40 steps of growth and then a flat line.

Real case: the per-index memo of pytorch/pytorch https://github.com/pytorch/pytorch/issues/35642
("Caching Support for class Dataset": ``self.cache[index] = ...`` filled once per sample, bounded
by the dataset's length), applied to per-sample targets instead of decoded samples.
"""
import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
BATCHES, BS, CLASSES = 40, 64, 100


def run(tracker_factory, steps=60):
    g = seed(3564)
    model = MLP(d_out=CLASSES, hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data_x = torch.randn(BATCHES * BS, DIM, generator=g)
    data_y = torch.randint(0, CLASSES, (BATCHES * BS,), generator=g)
    soft_targets = {}
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            b = step % BATCHES
            idx = torch.arange(b * BS, (b + 1) * BS)
            logits = model(data_x[idx])
            loss = nn.functional.cross_entropy(logits, data_y[idx])
            seen = [i for i in idx.tolist() if i in soft_targets]
            if seen:
                pos = torch.tensor([i - b * BS for i in seen])
                target = torch.stack([soft_targets[i] for i in seen])
                loss = loss + 0.5 * nn.functional.kl_div(
                    torch.log_softmax(logits[pos], -1), target, reduction="batchmean")
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                probs = torch.softmax(logits.detach() / 2.0, -1)
                for j, i in enumerate(idx.tolist()):
                    if i in soft_targets:
                        soft_targets[i].mul_(0.6).add_(probs[j], alpha=0.4)
                    else:
                        soft_targets[i] = probs[j].clone()
            tracker.step()
