"""A complex-valued network (complexPyTorch style) whose ``ComplexBatchNorm1d`` updates its
complex running mean and running covariance in training *without* ``torch.no_grad()``:
``self.running_mean = (1 - m) * self.running_mean + m * mean`` where ``mean`` comes from the
activations. Each step's running statistics are built on the previous step's, so the autograd
graph behind the (fixed-size) complex buffers grows every step (backward frees the saved
activations it shares with the loss, but the chain of nodes, one link per step, stays).

Real case: complexPyTorch https://github.com/wavefrontshaping/complexPyTorch/pull/23 ("fix memory
leak + reformatting": "This PR fixes the memory leak with ComplexBatchNorm1d (I added with
torch.no_grad as it was missing)").
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "running_mean", "top": 1}


class ComplexLinear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.re = nn.Linear(d_in, d_out)
        self.im = nn.Linear(d_in, d_out)

    def forward(self, z):
        return torch.complex(self.re(z.real) - self.im(z.imag), self.re(z.imag) + self.im(z.real))


class ComplexBatchNorm1d(nn.Module):
    def __init__(self, d, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.running_mean = torch.zeros(d, dtype=torch.cfloat)
        self.running_var = torch.ones(d)

    def forward(self, z):
        if self.training:
            mean = z.mean(0)
            var = (z - mean).abs().pow(2).mean(0)
            # the leak: should be under torch.no_grad() (or use mean.detach())
            self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
            self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var
        else:
            mean, var = self.running_mean, self.running_var
        return (z - mean) / (var + self.eps).sqrt()


class ComplexNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = ComplexLinear(DIM, 128)
        self.bn = ComplexBatchNorm1d(128)
        self.fc2 = ComplexLinear(128, 4)

    def forward(self, z):
        h = self.bn(self.fc1(z))
        h = torch.complex(torch.relu(h.real), torch.relu(h.imag))
        return self.fc2(h).abs()


def run(tracker_factory, steps=30):
    g = seed(109)
    model = ComplexNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            z = torch.complex(torch.randn(128, DIM, generator=g), torch.randn(128, DIM, generator=g))
            y = torch.randint(0, 4, (128,), generator=g)
            loss = nn.functional.cross_entropy(model(z), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
