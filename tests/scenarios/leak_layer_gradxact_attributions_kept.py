"""A captum-style ``LayerGradientXActivation`` explainer run on one batch every training step:
a forward hook captures the hidden layer's output (kept attached, as the layer method needs it
to take the gradient), ``torch.autograd.grad`` gives the gradient of the target scores with
respect to it, and the attribution is ``gradient * activation``. That product still has a
``grad_fn``: it hangs off the layer output and through it off the whole forward of the explained
batch. The loop keeps every step's attribution in ``attributions`` for an end-of-epoch report, so
every step's explanation graph (activations, saved inputs of fc1/fc2) stays alive.

Real case: captum "Ensure autograd graphs are freed between attribute calls"
https://github.com/meta-pytorch/captum/pull/1347 ("Some attributions returned by gradient-based
methods still have a ``grad_fn`` from autograd (e.g. ``LayerGradientXActivation``) ... a potential
source of VRAM accumulation"), and the growing-RAM report that led there,
https://github.com/meta-pytorch/captum/issues/866 ("Could be so that we are missing ``detach()``
call somewhere ... the full gradient graph accumulates").
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "attributions", "top": 1}


class LayerGradientXActivation:
    """Hand-made copy of the captum layer method: gradient of the target w.r.t. a layer's output,
    times that output."""

    def __init__(self, model, layer):
        self.model = model
        self.layer = layer

    def attribute(self, x, target):
        saved = {}

        def hook(module, inputs, output):
            saved["act"] = output

        handle = self.layer.register_forward_hook(hook)
        try:
            scores = self.model(x).gather(1, target[:, None]).sum()
        finally:
            handle.remove()
        act = saved["act"]
        (grads,) = torch.autograd.grad(scores, act)
        return grads * act  # still attached to the forward graph of the explained batch


def run(tracker_factory, steps=30):
    g = seed(1347)
    model = MLP(hidden=160)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    explainer = LayerGradientXActivation(model, model.fc2)
    attributions = []  # the leak: attached attributions, kept for the epoch report
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xe, ye = batch(g, n=64)
            attributions.append(explainer.attribute(xe, ye))
            tracker.step()
    return sum(float(a.detach().abs().mean()) for a in attributions)
