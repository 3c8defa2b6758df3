"""Optimizer step fused into backward the documented way: one optimizer per parameter and one
``register_post_accumulate_grad_hook`` per parameter, registered once before the loop. The hook
steps and zeroes that parameter's gradient as soon as it is accumulated, so no ``.grad`` survives
backward; the optimizer state (SGD momentum buffers) is created on the first step and then only
updated in place, so memory is flat after step one.

Real case: https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html
(the hook API, a simulated SGD update inside the hook); twin of a hook registered every step.
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Net(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.fc1 = nn.Linear(d, 128)
        self.fc2 = nn.Linear(128, 128)
        self.head = nn.Linear(128, 4)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def run(tracker_factory, steps=30):
    g = seed(313)
    model = Net()
    opts = {p: torch.optim.SGD([p], lr=0.01, momentum=0.9) for p in model.parameters()}

    def hook(p):
        opts[p].step()
        opts[p].zero_grad(set_to_none=True)

    for p in model.parameters():  # once, before training
        p.register_post_accumulate_grad_hook(hook)
    with tracker_factory(model, optimizer=next(iter(opts.values()))) as tracker:
        for _ in range(steps):
            x = torch.randn(256, 256, generator=g)
            y = torch.randint(0, 4, (256,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            tracker.step()
