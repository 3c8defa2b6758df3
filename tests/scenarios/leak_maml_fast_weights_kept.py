"""Second-order MAML: each meta-step adapts a copy of the weights on a task's support set with
``torch.autograd.grad(..., create_graph=True)`` and evaluates the adapted "fast weights" on the
query set. For later analysis the learner appends each task's fast weights to
``self.fast_weights_log``; they carry the second-order graph (the inner gradients' graphs and the
support activations), so every meta-step's whole graph stays alive.

Real case: "GPU memory continue to grow for MAML" https://github.com/wyharveychen/CloserLookFewShot/issues/62
("the memory usage accumulates as epoch increases ... caused by grad =
torch.autograd.grad(set_loss, fast_parameters, create_graph=True)"), and pytorch-maml
https://github.com/tristandeleu/pytorch-maml/issues/21 (memory growing over the course of
training vs. growing with the number of adaptation steps). The meta-loss is backpropagated with
``retain_graph=True`` as in few-shot's maml.py (https://github.com/oscarknagg/few-shot/issues/6),
so the kept graphs also keep their saved tensors.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "fast_weights_log", "top": 1}


def functional_mlp(x, w):
    h = torch.relu(x @ w[0].t() + w[1])
    return h @ w[2].t() + w[3]


class MAML:
    def __init__(self, inner_lr=0.1, inner_steps=2):
        net = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 5))
        self.weights = [p for p in net.parameters()]
        self.net = net
        self.inner_lr, self.inner_steps = inner_lr, inner_steps
        self.opt = torch.optim.Adam(self.weights, lr=1e-3)
        self.fast_weights_log = []  # the leak: graph-carrying fast weights, kept "for analysis"

    def adapt(self, xs, ys):
        fast = list(self.weights)
        for _ in range(self.inner_steps):
            loss = nn.functional.cross_entropy(functional_mlp(xs, fast), ys)
            grads = torch.autograd.grad(loss, fast, create_graph=True)
            fast = [w - self.inner_lr * gr for w, gr in zip(fast, grads)]
        return fast

    def meta_step(self, tasks):
        self.opt.zero_grad()
        total = 0.0
        for xs, ys, xq, yq in tasks:
            fast = self.adapt(xs, ys)
            self.fast_weights_log.append(fast)
            total = total + nn.functional.cross_entropy(functional_mlp(xq, fast), yq)
        (total / len(tasks)).backward(retain_graph=True)
        self.opt.step()


def run(tracker_factory, steps=30):
    g = seed(112)
    maml = MAML()

    def task():
        return (torch.randn(25, DIM, generator=g), torch.randint(0, 5, (25,), generator=g),
                torch.randn(25, DIM, generator=g), torch.randint(0, 5, (25,), generator=g))

    with tracker_factory(maml.net, optimizer=maml.opt) as tracker:
        for _ in range(steps):
            maml.meta_step([task() for _ in range(2)])
            tracker.step()
