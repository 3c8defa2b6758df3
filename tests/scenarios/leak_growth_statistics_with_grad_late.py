"""A growing network (GroMo style): every layer is a ``LinearGrowingModule`` that, while a growth
phase is under way, accumulates the second-order statistic of its input,
``tensor_s += x.T @ x / n``, to compute the new neurons later. The first growth phase starts after
a warm-up (about 40% into the run, as a scheduler decides) and lasts to the end of the run. The
inputs the statistic sees still require grad (they come out of the previous layer), and the update
is not done under ``torch.no_grad()``: each ``+=`` adds a node to the statistic's autograd graph
that saves that step's input, and since the statistic is never detached the chain keeps every
step's inputs alive. Memory is flat during warm-up and grows by one batch of layer inputs a step
once statistics are on.

Real case: growingnet/gromo https://github.com/growingnet/gromo/issues/137 ("The updates of the
tensors have ``requires_grad = True``, which causes the additions to be retained in the
computational graph and unnecessarily increases the allocated memory") and
https://github.com/growingnet/gromo/issues/135 (a missing ``.detach()`` on the stored activity).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "tensor_s", "top": 1}
D, H = 96, 128


class LinearGrowingModule(nn.Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)
        self.store_input = False
        self.tensor_s = torch.zeros(d_in, d_in)
        self.samples = 0

    def init_computation(self):
        self.store_input = True

    def forward(self, x):
        if self.store_input:
            self.tensor_s = self.tensor_s + x.T @ x / x.shape[0]  # the leak: x.detach()
            self.samples += x.shape[0]
        return super().forward(x)


class GrowingMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = LinearGrowingModule(D, H)
        self.l2 = LinearGrowingModule(H, H)
        self.l3 = LinearGrowingModule(H, 4)

    def growing_layers(self):
        return [self.l2, self.l3]

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def run(tracker_factory, steps=60):
    g = seed(404)
    model = GrowingMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    growth_start = int(steps * 0.4)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step == growth_start:
                for layer in model.growing_layers():
                    layer.init_computation()
            x = torch.randn(64, D, generator=g)
            y = torch.randint(0, 4, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
