"""Quantization-aware training with the stock ``torch.ao.quantization`` machinery: the model is
prepared with ``prepare_qat`` (default QAT qconfig: ``FusedMovingAvgObsFakeQuantize`` modules with
moving-average min/max observers, plus a ``HistogramObserver``-free setup) and fine-tuned; the
observers are fed every step but keep only fixed-size running state (min/max, scale, zero point).
Memory rises in the first step and then stays flat.

Real case: https://github.com/pytorch/pytorch/pull/29768 (the histogram observer that kept every
batch's histogram was changed to remap one running histogram: observers fed every step must keep
bounded state); this is the bounded, stock version.
"""
import torch
from torch import nn
from torch.ao.quantization import QuantStub, DeQuantStub, get_default_qat_qconfig, prepare_qat

from ._common import DIM, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class QMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = QuantStub()
        self.fc1 = nn.Linear(DIM, 128)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(128, 4)
        self.dequant = DeQuantStub()

    def forward(self, x):
        return self.dequant(self.fc2(self.relu(self.fc1(self.quant(x)))))


def run(tracker_factory, steps=30):
    g = seed(111)
    model = QMLP().train()
    model.qconfig = get_default_qat_qconfig("x86")
    model = prepare_qat(model)
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
