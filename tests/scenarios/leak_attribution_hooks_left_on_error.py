"""A captum-style layer-activation explainer registers a forward hook on the target layer for each
``attribute`` call and removes it at the end, but not in a ``finally``: when the call raises, the
hook stays. The training loop explains one batch per step inside ``try/except ValueError`` (batches
that contain the "ignore" label -1 are rejected after the forward), so every rejected batch leaves
one more hook on ``model.fc2._forward_hooks``. Each leftover hook keeps its own ``saved`` dict and
overwrites it with a clone of the layer output of every later forward (captum clones the saved
layer output): one more activation-sized tensor held for each failed call, and one more hook run
(and clone made) on every forward.

Real case: captum "Hook Removal" https://github.com/meta-pytorch/captum/pull/340 ("ensures that
all hooks are removed, even if attribution raises an error while the hook is placed"), and
cybertronai/autograd-lib https://github.com/cybertronai/autograd-lib/issues/5 ("exception inside
module_hook leaves old hooks hanging around").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

# the location is the piled-up hooks' closure variable, as leak_hook_registered_each_step names `feats`
EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "saved", "top": 1}


class LayerActivation:
    def __init__(self, model, layer):
        self.model = model
        self.layer = layer

    def attribute(self, x, target):
        saved = {}

        def forward_hook(module, inputs, output):
            saved["layer"] = output.detach().clone()  # captum clones the layer output

        handle = self.layer.register_forward_hook(forward_hook)
        with torch.no_grad():
            self.model(x)
        if (target < 0).any():
            raise ValueError("target contains ignored samples")  # the leak: handle never removed
        handle.remove()
        return saved["layer"].gather(1, target[:, None].clamp(max=saved["layer"].shape[1] - 1))


def run(tracker_factory, steps=30):
    g = seed(340)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    explainer = LayerActivation(model, model.fc2)
    skipped = 0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=96)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xe, ye = batch(g, n=96)
            if step % 2 == 1:
                ye[0] = -1  # an "ignore" label slips into every other explained batch
            try:
                explainer.attribute(xe, ye)
            except ValueError:
                skipped += 1
            tracker.step()
    return skipped
