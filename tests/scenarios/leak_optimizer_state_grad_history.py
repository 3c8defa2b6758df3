"""A custom optimizer keeps, in its per-parameter ``self.state[p]``, a list of every past gradient.

Real case: https://github.com/secondmind-labs/trieste/issues/87 ("Configurable optimizer history size":
an optimizer that tracks its whole history in memory, asked to keep only the latest steps) and
https://github.com/uncbiag/mermaid/pull/24 ("Added ability to record optimizer history"). Unlike an
extra attribute on the optimizer, the history lives in ``state[p]["grad_history"]`` -- where Adam keeps
its legitimate, bounded ``exp_avg``.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "grad_history", "top": 1}


class HistorySGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                hist = st.setdefault("grad_history", [])
                hist.append(p.grad.clone())  # the leak: every gradient kept, for a variance estimate
                st["step"] = st.get("step", 0) + 1
                p.add_(p.grad, alpha=-group["lr"])


def run(tracker_factory, steps=30):
    g = seed(113)
    model = MLP(hidden=128)
    opt = HistorySGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
