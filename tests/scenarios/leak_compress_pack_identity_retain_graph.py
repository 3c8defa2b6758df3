"""Activation compression with saved-tensor hooks: the pack hook stores large saved tensors as
bfloat16 (``x.detach().to(torch.bfloat16)``) but hands small ones back unchanged (``return x``,
"not worth compressing"), and the unpack hook casts back. The training step calls
``loss.backward(retain_graph=True)`` (left over from a two-loss version of the loop). With plain
autograd that is harmless once ``loss`` is dropped; but a small tensor saved as an op's *output*
(the sigmoid gate, a ``(batch, 16)`` tensor) is packed as the live output, ``grad_fn`` included: the
graph node owns a tensor that owns the node, a cycle through autograd's C++ graph that neither
reference counting nor Python's garbage collector frees, and ``retain_graph=True`` means backward
never releases it. Every step's graph, with the compressed activations it saved, stays alive.

Real case: "Document pack_hook reference-cycle caveat for saved tensor hooks"
https://github.com/pytorch/pytorch/pull/189025 (a pack hook that returns its live input forms a
cycle "unreclaimable -- even by an explicit gc.collect() -- when the graph is built without running
backward or with retain_graph=True") and https://github.com/pytorch/pytorch/issues/115255
(identity saved-tensor hooks leaving memory growing), with the compression example of the saved
tensors hooks tutorial https://pytorch.org/tutorials/intermediate/autograd_saved_tensors_hooks_tutorial.html
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "compress_", "top": 1}

SMALL = 4096


def compress_pack(x):
    if x.numel() < SMALL or not x.is_floating_point():
        return x  # the leak: the live tensor, grad_fn and all
    return x.dtype, x.detach().to(torch.bfloat16)


def compress_unpack(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    dtype, x = packed
    return x.to(dtype)


class GatedNet(nn.Module):
    def __init__(self, hidden=256, gates=16):
        super().__init__()
        self.fc1 = nn.Linear(DIM, hidden)
        self.gate = nn.Linear(hidden, gates)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 4)
        self.gates = gates

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        g = torch.sigmoid(self.gate(h))  # small, saved as its output
        h = torch.relu(self.fc2(h)) * g.repeat_interleave(h.shape[1] // self.gates, dim=1)
        return self.head(h)


def run(tracker_factory, steps=30):
    g = seed(5609)
    model = GatedNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=128)
            with torch.autograd.graph.saved_tensors_hooks(compress_pack, compress_unpack):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            tracker.step()
