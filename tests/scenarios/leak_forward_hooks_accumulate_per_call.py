"""A wrapper that injects per-call scalings with a forward pre-hook registered on every forward
call, keeping only the newest handle: the hook of each earlier call is never removed, so the hooks
pile up on the layer, one more each step, and each step runs all of them. Each hook keeps only its
call's scaling factor: memory grows by little, the hook count by one a step.

Real case: huggingface/peft#2761, https://github.com/huggingface/peft/pull/2761 ("forward hooks
would accumulate during generation, since one hook per forward step was being registered ... only
the last hook was removed, resulting in hooks accumulating").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "python_objects", "location": "_forward_pre_hooks", "top": 1}


class ScaledClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = MLP()
        self.gate = nn.Linear(32, 1)
        self._handle = None

    def forward(self, x):
        scaling = float(torch.sigmoid(self.gate(x)).mean())  # this call's scaling

        def scale_input(module, args, scaling=scaling):
            return (args[0] * scaling,)

        # bug: a new hook each call; only the newest handle is kept (and removed at the very end)
        self._handle = self.base.fc2.register_forward_pre_hook(scale_input)
        return self.base(x)


def run(tracker_factory, steps=30):
    g = seed(72)
    model = ScaledClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    model._handle.remove()
