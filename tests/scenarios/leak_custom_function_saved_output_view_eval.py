"""A hand-written fused softmax (``torch.autograd.Function``, as kernels wrapped for Triton are)
saves its output flattened to 2-D for the backward: ``ctx.save_for_backward(y.view(-1, n))``, a
*view of its own output*. While a backward runs, autograd frees the saved view and all is well;
but a forward whose output is dropped without a backward leaves a reference cycle inside
autograd's C++ graph (output -> grad_fn -> saved view -> output's base) that neither reference
counting nor Python's garbage collector can free. The loop trains normally and also scores a
held-out batch every step without ``torch.no_grad()`` (the loss is only ``.item()``-ed): harmless
for built-in ops, but here every such forward leaks its softmax output and the graph behind it.

Real case: "interactions between views + autograd.Function + AOTAutograd causes memory leak"
https://github.com/pytorch/pytorch/issues/94990 (saving a view of the output in an
``autograd.Function`` leaks when no backward runs; still open), worked around in
Lightning-AI/lightning-thunder https://github.com/Lightning-AI/lightning-thunder/pull/1352
("PyTorch has a bug where saving a view of the output in torch.autograd.Function leads to memory
leak ... We side-step this issue by detaching the saved tensors").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "FusedSoftmax", "top": 1}


class FusedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, dim=-1)
        ctx.save_for_backward(y.view(-1, y.shape[-1]))  # the leak: a view of the output
        return y

    @staticmethod
    def backward(ctx, grad):
        (y2d,) = ctx.saved_tensors
        y = y2d.view(grad.shape)
        return y * (grad - (grad * y).sum(-1, keepdim=True))


class SoftmaxMixer(nn.Module):
    def __init__(self, d=DIM, hidden=256, classes=4):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = FusedSoftmax.apply(self.fc1(x))
        return self.head(torch.relu(self.fc2(h)))


def run(tracker_factory, steps=30):
    g = seed(94990)
    model = SoftmaxMixer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    val_losses = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xv, yv = batch(g, n=128)
            val_losses.append(nn.functional.cross_entropy(model(xv), yv).item())  # no torch.no_grad()
            tracker.step()
    return val_losses
