"""Gradient monitoring with tensor hooks on every parameter, set up once by a helper:
``p.register_hook(lambda g, name=name: gradient_norms[name].append(g.norm()))``. The hook keeps
the 0-d norm *tensor* (the tutorial it was copied from calls ``.item()``), so each backward adds
one small tensor per parameter to lists that nothing trims. The dict of lists is a local of the
helper: only the hook closures on the parameters reach it (``param._backward_hooks`` -> lambda ->
closure cell). With a small transformer's ~30 parameters that is ~30 tensors a step: a slow leak.

Real case: Pyro's "Demonstrate how to monitor gradients in gmm tutorial"
https://github.com/pyro-ppl/pyro/pull/907 (``value.register_hook(lambda g, name=name:
gradient_norms[name].append(g.norm().item()))``, kept for plotting), here without ``.item()``, the
tensor-logging slip of https://github.com/thuml/Autoformer/issues/130.
"""
from collections import defaultdict

import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "gradient_norms", "top": 1}


def watch_gradients(model):
    """Log each parameter's gradient norm on every backward, for plots at the end of training."""
    gradient_norms = defaultdict(list)
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: gradient_norms[name].append(g.norm()))  # the leak
    return len(gradient_norms)


def run(tracker_factory, steps=30):
    g = seed(907)
    model = TinyTransformer(vocab=64, layers=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    watch_gradients(model)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            tokens = torch.randint(0, 64, (16, 24), generator=g)
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
