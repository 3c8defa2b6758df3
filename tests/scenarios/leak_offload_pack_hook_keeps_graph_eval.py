"""A hand-written activation-offloading wrapper: the model's forward runs under
``torch.autograd.graph.saved_tensors_hooks`` whose pack hook moves each saved tensor to the host,
``x.to("cpu", non_blocking=True)``, and whose unpack hook moves it back. The pack hook does not
``detach()`` (nor copy into a fresh buffer as ``torch.autograd.graph.save_on_cpu`` does), so for a
tensor an op saves as its *output* (tanh, sigmoid, softmax save their result) the packed object is
the live output itself, ``grad_fn`` included (on a CPU run ``.to("cpu")`` returns the same tensor;
on a GPU run the copy's ``ToCopyBackward`` node points back at the output's graph). The graph node
then owns a tensor that owns the node: a reference cycle through autograd's C++ graph, which
Python's garbage collector cannot see. A training step's ``backward()`` releases the saved tensors
and so breaks each cycle; but the loop also scores a held-out batch every step through the same
wrapped model without ``torch.no_grad()`` (only ``.item()`` of the loss is kept), and each of those
forwards leaves its whole graph, with every saved activation, alive for good.

Real case: "Document pack_hook reference-cycle caveat for saved tensor hooks"
https://github.com/pytorch/pytorch/pull/189025 (a pack hook that keeps the live tensor it receives
forms an output -> grad_fn -> SavedVariable -> output cycle, "unreclaimable -- even by an explicit
gc.collect() -- when the graph is built without running backward or with retain_graph=True") and
"lambda saved_tensor_hook memory leak?" https://github.com/pytorch/pytorch/issues/115255
(identity ``saved_tensors_hooks(lambda x: x, lambda x: x)`` leaving GPU memory growing).
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "OffloadedMLP.offload", "top": 1}


class OffloadedMLP(nn.Module):
    def __init__(self, d_in=DIM, hidden=256, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    @staticmethod
    def offload_pack(x):
        return x.device, x.to("cpu", non_blocking=True)  # the leak: no .detach()

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
    g = seed(5601)
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
