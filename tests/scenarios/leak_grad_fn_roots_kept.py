"""A graph-inspection helper keeps each step's ``loss.grad_fn`` (not the loss) to draw the graph later.

Real case: https://discuss.pytorch.org/t/how-to-debug-causes-of-gpu-memory-leaks/6741/22 (the autograd
graph -- ``z.grad_fn`` -- holds onto the tensors it saved, invisible to the GC) and
https://discuss.pytorch.org/t/gpu-memory-increase-while-i-wanna-to-backward-with-accumulative-loss/43284.
The loss is computed and backpropagated with ``retain_graph=True`` (to let a second diagnostic pass
run), and only the graph's root node is kept in ``graph_roots``: no tensor is kept by Python, yet each
node keeps its saved activations.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "graph_roots", "top": 1}


class GraphInspector:
    def __init__(self):
        self.graph_roots = []

    def capture(self, loss):
        self.graph_roots.append(loss.grad_fn)  # the leak: the node keeps the whole saved graph


def run(tracker_factory, steps=30):
    g = seed(107)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inspector = GraphInspector()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            inspector.capture(loss)
            del loss
            tracker.step()
