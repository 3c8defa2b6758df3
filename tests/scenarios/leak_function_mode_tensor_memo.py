"""A shape-checking ``TorchFunctionMode`` (a hand-made cousin of FakeTensorMode's converter): every
tensor that flows through an op is converted once to a ``meta`` twin, memoized in
``tensor_memo`` keyed by ``id(t)`` with the *real* tensor kept next to its twin so the id stays
valid. The mode object is built once and entered around every forward, so the memo keeps every
step's activations (with their autograd graphs) alive: one entry per intermediate tensor, never
dropped, although the memo only needed to live as long as each tensor.

Real case: "Weak-ref-ify MetaConverter and FakeTensorConverter"
https://github.com/pytorch/pytorch/pull/80544 ("Make MetaConverter and FakeTensorConverter hold
weak references to their memoized tensors ... Otherwise it can be tricky for users to make sure
all existing FakeTensors or FakeTensorModes are deleted which otherwise will leak memory"), the
partial fix of https://github.com/pytorch/torchdynamo/issues/468.
"""
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "tensor_memo", "top": 1}


class ShapeCheckMode(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.tensor_memo = {}  # id(t) -> (t, meta twin): the leak, strong refs to every tensor seen

    def meta_of(self, t):
        entry = self.tensor_memo.get(id(t))
        if entry is None:
            entry = self.tensor_memo[id(t)] = (t, torch.empty_like(t, device="meta"))
        return entry[1]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in args:
            if isinstance(a, torch.Tensor):
                self.meta_of(a)
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            self.meta_of(out)
        return out


def run(tracker_factory, steps=30):
    g = seed(80544)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    checker = ShapeCheckMode()
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=96)
            with checker:
                logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
