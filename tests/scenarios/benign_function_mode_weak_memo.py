"""A shape-checking ``TorchFunctionMode`` that converts every tensor it sees to a ``meta`` twin and
memoizes the twin in a ``WeakTensorKeyDictionary``: the memo holds the real tensors only weakly, so
an entry vanishes when its tensor dies. The mode object lives for the whole run and is entered
around every forward; the parameters' entries stay (bounded), each step's activation entries go
with the step. A long-lived memo that sees hundreds of new tensors a step, but does not grow.

Real case: the fix of "Weak-ref-ify MetaConverter and FakeTensorConverter"
https://github.com/pytorch/pytorch/pull/80544 (memoized tensors held by weak references so the
converter does not leak), with the ``torch.utils.weak.WeakTensorKeyDictionary`` suggested in the
review of https://github.com/pytorch/pytorch/pull/103734.
"""
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ShapeCheckMode(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.tensor_memo = WeakTensorKeyDictionary()

    def meta_of(self, t):
        twin = self.tensor_memo.get(t)
        if twin is None:
            twin = self.tensor_memo[t] = torch.empty_like(t, device="meta")
        return twin

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
    g = seed(80545)
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
    return len(checker.tensor_memo)
