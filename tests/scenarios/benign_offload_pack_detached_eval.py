"""A hand-written activation-offloading wrapper done right: the model's forward runs under
``torch.autograd.graph.saved_tensors_hooks`` whose pack hook moves each saved tensor to the host
*detached* (``x.detach().to("cpu")``, as ``torch.autograd.graph.save_on_cpu`` copies into a fresh
buffer) and whose unpack hook moves it back. The loop also scores a held-out batch every step
through the same wrapped model without ``torch.no_grad()`` (wasteful, only ``.item()`` is kept):
the packed tensors carry no ``grad_fn``, so no cycle forms and each scoring graph is freed by
reference counting as soon as the loss is dropped. Memory is flat.

Real case: the fix described in "Document pack_hook reference-cycle caveat for saved tensor hooks"
https://github.com/pytorch/pytorch/pull/189025 ("Detaching is lossless: autograd stashes the
grad_fn" and restores it on unpack), the healthy twin of
https://github.com/pytorch/pytorch/issues/115255.
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class OffloadedMLP(nn.Module):
    def __init__(self, d_in=DIM, hidden=256, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    @staticmethod
    def offload_pack(x):
        return x.device, x.detach().to("cpu", non_blocking=True)

    @staticmethod
    def offload_unpack(packed):
        device, x = packed
        return x.to(device, non_blocking=True)

    def forward(self, x):
        with torch.autograd.graph.saved_tensors_hooks(self.offload_pack, self.offload_unpack):
            h = torch.tanh(self.fc1(x))
            h = torch.sigmoid(self.fc2(h)) * h
            return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(5607)
    model = OffloadedMLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val_x, val_y = batch(g, n=128)
    val_losses = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            # quick held-out score each step, forgetting torch.no_grad()
            val_loss = nn.functional.cross_entropy(model(val_x), val_y)
            val_losses.append(val_loss.item())
            tracker.step()
