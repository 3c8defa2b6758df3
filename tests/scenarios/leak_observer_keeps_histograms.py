"""Post-training-quantization calibration (the model is also fine-tuned while observed) with a
custom ``torch.ao.quantization`` observer that, to pick the clipping range "at the end", keeps
every batch's activation histogram (``torch.histc`` with 2048 bins) and its min/max in lists and
merges them only in ``calculate_qparams``. The observer sits in the model and is fed every step,
so its lists grow by one 8 KiB histogram per step.

Real case: "Avoid keeping old histograms in the histogram observer to fix the OOM issue"
https://github.com/pytorch/pytorch/pull/29768 ("The previous histogram observer saves all
histograms for new data and merge the histograms in the end. It could cause OOM issue when we want
to collect histograms on large amount of data").
"""
import torch
from torch import nn
from torch.ao.quantization.observer import ObserverBase

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "histograms", "top": 1}


class DeferredHistogramObserver(ObserverBase):
    def __init__(self, bins=2048, dtype=torch.quint8):
        super().__init__(dtype=dtype)
        self.bins = bins
        self.histograms = []  # the leak: one histogram per batch, merged only at the end
        self.ranges = []

    def forward(self, x):
        xd = x.detach()
        lo, hi = xd.min(), xd.max()
        self.histograms.append(torch.histc(xd, self.bins, lo.item(), hi.item()))
        self.ranges.append(torch.stack([lo, hi]))
        return x

    @torch.jit.export
    def calculate_qparams(self):
        r = torch.stack(self.ranges)
        lo, hi = r[:, 0].min(), r[:, 1].max()
        scale = (hi - lo) / 255
        return scale.reshape(1), torch.round(-lo / scale).int().reshape(1)


class ObservedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, 256)
        self.obs1 = DeferredHistogramObserver()
        self.fc2 = nn.Linear(256, 4)

    def forward(self, x):
        return self.fc2(self.obs1(torch.relu(self.fc1(x))))


def run(tracker_factory, steps=30):
    g = seed(110)
    model = ObservedMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x = torch.randn(64, DIM, generator=g)
            y = torch.randint(0, 4, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
