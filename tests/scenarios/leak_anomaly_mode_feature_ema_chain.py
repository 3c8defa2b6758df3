"""Anomaly detection left on from a NaN hunt (``torch.autograd.set_detect_anomaly(True)`` at the
top of the script), and a feature-drift monitor that keeps an exponential moving average of the
penultimate layer's mean activation, ``monitor.feature_ema = 0.99 * monitor.feature_ema + 0.01 *
feats.mean(0)``, fed from a forward hook without ``.detach()``. Each update makes the average the
head of a graph that reaches back through every earlier update to every step's forward graph: the
activations those graphs saved stay alive, and under anomaly mode every node of them also keeps
the Python traceback of the forward line that created it (a dict with a list of formatted
strings), so much of what grows is host memory in strings held by autograd's C++ nodes, not
tensor bytes.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/26408 ("Training a model
with ``torch.autograd.set_detect_anomaly(True)`` causes a severe memory leak because every line
of code that is executed is stored in memory as a string"; the repro feeds each output back in,
``data = model(data)``, so the graph is never freed and pympler sees only the strings grow) and
JasonMa2016/GoFAR https://github.com/JasonMa2016/GoFAR/pull/2 ("Removed debug flag that was
causing memory leaks").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "feature_ema", "top": 1}


class DriftMonitor:
    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.feature_ema = None

    def __call__(self, module, inputs, output):
        m = output.mean(0)  # the leak: output.detach().mean(0) would keep no graph
        if self.feature_ema is None:
            self.feature_ema = m
        else:
            self.feature_ema = self.momentum * self.feature_ema + (1 - self.momentum) * m


def run(tracker_factory, steps=30):
    g = seed(5803)
    model = MLP(hidden=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    monitor = DriftMonitor()
    handle = model.fc2.register_forward_hook(monitor)
    was = torch.is_anomaly_enabled()
    torch.autograd.set_detect_anomaly(True)
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=16)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
    finally:
        torch.autograd.set_detect_anomaly(was)
        handle.remove()
