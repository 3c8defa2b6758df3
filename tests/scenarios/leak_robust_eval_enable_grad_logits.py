"""A training loop that also tracks robust accuracy: each step it attacks a held-out batch with
FGSM and keeps the logits on the adversarial batch, to report robust accuracy at the end. The check
runs inside ``torch.no_grad()`` with the attack wrapped in ``torch.enable_grad()`` (needed for the
input gradient), and the prediction on the adversarial batch was put inside the same
``enable_grad`` block. The attack also returns ``x_adv`` without ``.detach()``. So every kept entry
of ``adv_logits`` has a grad_fn, and its graph holds the activations the forward pass saved (and
reaches back to the attacked input and its ``.grad``).

Real case: LostOxygen/poison_froggo https://github.com/LostOxygen/poison_froggo/issues/1 ("CUDA
memory keeps growing in forward_step": an attack step under ``torch.enable_grad()`` whose outputs
keep their autograd graphs; ``.detach()`` fixes it), BorealisAI/advertorch
https://github.com/BorealisAI/advertorch/pull/68 ("FGM and FGSM return the adversarials without
clearing the computational graph ... high memory usage"), and locuslab/convex_adversarial
https://github.com/locuslab/convex_adversarial/issues/34 (PGD evaluation inside ``no_grad`` needs
``torch.enable_grad()``).
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "adv_logits", "top": 1}


def fgsm(model, x, y, eps=0.05):
    x = x.clone().requires_grad_(True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return x + eps * x.grad.sign()  # not detached


def run(tracker_factory, steps=30):
    g = seed(412)
    model = MLP(d_in=128, hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    adv_logits = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            x, y = batch(g, n=64, d=128)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            xv, yv = batch(g, n=128, d=128)
            model.eval()
            with torch.no_grad():
                with torch.enable_grad():
                    x_adv = fgsm(model, xv, yv)
                    adv_logits.append(model(x_adv))  # the leak: predicted with grad on, kept
            model.train()
            opt.zero_grad()  # the attack's backward wrote parameter grads
            tracker.step()
    robust_acc = sum((lg.argmax(1) == 0).float().mean() for lg in adv_logits)  # noqa: F841
