"""Optimizer diagnostics for a dashboard: after each step the loop reads Adam's moment buffers and
keeps, per parameter, the row norms of the update Adam just applied (``exp_avg / (sqrt(exp_avg_sq)
+ eps)``), in a per-parameter history to plot later. The moments do not require grad, so each entry
is a small detached tensor (a few hundred floats); but one is added per parameter per step and
none is ever dropped: a few KiB a step that a short run could read as noise or warm-up.

Real case: wandb/wandb https://github.com/wandb/wandb/issues/2171 ("Logging something from the
optimizer state dict": "log some buffers in my optimizer ... each parameter p has an associated
state dict") and the PyTorch FAQ https://pytorch.org/docs/stable/notes/faq.html ("Don't accumulate
history across your training loop").
"""

from collections import defaultdict

import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "update_history", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(5712)
    model = TinyTransformer(vocab=64, layers=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    names = {p: n for n, p in model.named_parameters()}
    update_history = defaultdict(list)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            tokens = torch.randint(0, 64, (16, 33), generator=g)
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            for p, state in opt.state.items():
                update = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + 1e-8)
                update_history[names[p]].append(update.norm(dim=-1) if update.dim() > 1 else update.norm())
            tracker.step()
