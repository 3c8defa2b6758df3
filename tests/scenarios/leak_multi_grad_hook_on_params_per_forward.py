"""A gradient-times-input monitor built on ``torch.autograd.graph.register_multi_grad_hook``: a
forward pre-hook on each Linear layer registers, on every forward, one multi-grad hook over the
layer's parameters that runs once all their gradients are ready and logs ``|input| * |grad|`` for
the layer; the hook's function closes over the layer's input of that forward. The handles are
dropped, never removed. Registered on parameters (leaves that live for the whole run), each
multi-grad hook stays in the parameters' hook dicts for good: every step adds one more per layer,
each keeping the input activation of the step it was made in (and the emptied graph behind it),
and every backward runs all of them.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/pull/139214 (``ModuleTracker``
registers a multi-grad hook from its forward hooks on every forward; hooks registered where
they never fire or are never released made memory grow until an explicit ``gc.collect`` was
added) and the same shape with single tensor hooks in zennit
https://github.com/chr5tphr/zennit/issues/11 (hook closures kept the tensors they referenced).
"""
import torch
from torch import nn
from torch.autograd.graph import register_multi_grad_hook

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "layer_input", "top": 1}


class GradInputMonitor:
    def __init__(self):
        self.stats = {}

    def attach(self, model):
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Linear):
                mod.register_forward_pre_hook(self._pre_hook(name))

    def _pre_hook(self, name):
        def pre_hook(module, inputs):
            layer_input = inputs[0]

            def on_grads_ready(grads):
                g = grads[0]
                if g is not None:
                    self.stats[name] = (layer_input.detach().abs().mean() * g.norm()).item()

            # the leak: registered on the parameters every forward, the handle never removed
            register_multi_grad_hook(tuple(module.parameters()), on_grads_ready)
        return pre_hook


def run(tracker_factory, steps=30):
    g = seed(5806)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = GradInputMonitor()
    monitor.attach(model)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
