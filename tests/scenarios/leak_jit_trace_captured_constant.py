"""A helper function is traced with ``torch.jit.trace`` on every step, and the tensor it closes
over (a projection made for the batch) becomes a constant of the traced graph: TorchScript keeps
every traced function in its global compilation unit for the rest of the process, so each step's
tensor stays alive with it, held by nothing the loop can see.

Real case: https://github.com/EmbarkStudios/emote/pull/126 ("work around memory leak in
torch.jit.trace": "We leak every single tensor in the model each iteration") and
https://github.com/pytorch/pytorch/issues/86537 ("Running JIT trace for many times leads to OOM").
"""
import torch
from torch import nn

from ._common import DIM, MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "torch.jit.trace(", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(94)
    model = MLP(hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g)
            proj = torch.randn(DIM, 512, generator=g).to(x.device)

            def features(a):
                return torch.tanh(a @ proj)

            with torch.no_grad():
                feats = torch.jit.trace(features, x, check_trace=False)(x)  # the leak: proj kept as a constant
            loss = nn.functional.cross_entropy(model(x), y) + 1e-3 * feats.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
