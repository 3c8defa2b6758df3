"""A small config/record framework stores field values on the descriptor rather than on the
instance: ``TensorField.__set__`` writes ``self._memory[instance] = value`` into a dict that
belongs to the class attribute, so it is shared by all instances and keyed by strong references
to them. The trainer builds one ``StepOutput`` record a step (inputs, logits and per-sample
losses as fields) and drops it after logging, but the field descriptors still hold every record and its
tensors.

Real case: jazzband/jsonmodels https://github.com/jazzband/jsonmodels/issues/64 ("Storage of data
in field leaks memory": "all instances of _BaseField_ have a field called *_memory* in it
containing a dict of all (instance, value) pairs ... will leak all instances of the class it is
used in") and rednafi/com.rednafi https://github.com/rednafi/com.rednafi/issues/18 ("Memory
leakage in Python descriptors": "using record dict can cause memory leak", fixed with
``weakref.WeakKeyDictionary``).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_memory", "top": 1}


class TensorField:
    def __init__(self):
        self._memory = {}  # the leak: instance -> value, strong keys, never pruned

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return self._memory[instance]

    def __set__(self, instance, value):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{self.name} must be a tensor")
        self._memory[instance] = value


class StepOutput:
    inputs = TensorField()
    logits = TensorField()
    losses = TensorField()

    def __init__(self, inputs, logits, losses):
        self.inputs = inputs
        self.logits = logits
        self.losses = losses

    def summary(self):
        return {"loss": float(self.losses.mean()), "acc": float((self.logits.argmax(1) >= 0).float().mean())}


def _forget_all():
    for field in (StepOutput.inputs, StepOutput.logits, StepOutput.losses):
        field._memory.clear()


def run(tracker_factory, steps=30):
    g = seed(3110)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    _forget_all()
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = batch(g, n=512)
                logits = model(x)
                losses = nn.functional.cross_entropy(logits, y, reduction="none")
                loss = losses.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                out = StepOutput(x, logits.detach(), losses.detach())
                out.summary()
                tracker.step()
    finally:
        _forget_all()
