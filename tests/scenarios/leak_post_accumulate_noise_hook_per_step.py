"""A hand-rolled differentially-private update: after each parameter's gradient is accumulated, a
``register_post_accumulate_grad_hook`` adds Gaussian noise to ``p.grad``. The helper that draws the
noise and registers the hooks is called at the top of every step (fresh noise each step seemed to
need a fresh hook), and the returned handles are dropped: the hooks pile up in every parameter's
``_post_accumulate_grad_hooks`` dict, each closure keeping its own parameter-sized ``noise`` tensor,
and every backward now runs all of them. The growth is one copy of the model's parameters a step.

Real case: the post-accumulate-grad hook API is meant to be registered once per parameter
("Fuse optimizer into backward" tutorial, https://github.com/pytorch/tutorials/pull/2568); hooks
registered again and again with their handles discarded accumulate with what their closures keep,
as in fffasttime/MRFI https://github.com/fffasttime/MRFI/pull/5 ("Fix hook memory leak ... by
tracking and exposing RemovableHandle references") and "Avoid register hooks to AccumulateGrad in
every FSDP iteration" https://github.com/pytorch/pytorch/issues/65194.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "noise", "top": 1}


def add_noise_hooks(model, sigma, g):
    for p in model.parameters():
        noise = torch.randn(p.shape, generator=g) * sigma

        def add_noise(param, noise=noise):
            param.grad.add_(noise)

        # the leak: registered every step, handle dropped, never removed
        p.register_post_accumulate_grad_hook(add_noise)


def run(tracker_factory, steps=30):
    g = seed(5604)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            add_noise_hooks(model, sigma=1e-3, g=g)
            x, y = batch(g, n=64)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
