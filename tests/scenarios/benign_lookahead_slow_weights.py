"""A Lookahead optimizer wrapper ("k steps forward, 1 step back"): every ``k`` steps the fast
weights are pulled towards a slow copy of the weights, and that slow copy is created lazily, in
the base optimizer's per-parameter state, the first time a slow update runs (at step ``k``).
Memory steps up once, by one copy of the weights, at step ``k`` (after AdamW's own state appeared
at step 0), then stays flat: every later slow update works in place.

Real case: timm's ``Lookahead`` wrapper,
https://github.com/huggingface/pytorch-image-models/blob/main/timm/optim/lookahead.py
(``update_slow``: ``if 'lookahead_slow_buff' not in param_state: ... torch.empty_like(fast_p)``
then ``slow.add_(fast_p - slow, alpha=...)`` and ``fast_p.copy_(slow)``; the slow update runs when
``lookahead_step % lookahead_k == 0``, default ``k=6``). Like timm's, the wrapper below shares the
base optimizer's ``param_groups`` and keeps the slow buffer in the base optimizer's ``state``.
"""
from collections import defaultdict

import torch
from torch import nn
from torch.optim.optimizer import Optimizer

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class Lookahead(Optimizer):
    def __init__(self, base_optimizer, alpha=0.5, k=6):
        defaults = dict(lookahead_alpha=alpha, lookahead_k=k, lookahead_step=0)
        self._base_optimizer = base_optimizer
        self.param_groups = base_optimizer.param_groups
        self.defaults = base_optimizer.defaults
        self.defaults.update(defaults)
        self.state = defaultdict(dict)
        for name, default in defaults.items():
            for group in self._base_optimizer.param_groups:
                group.setdefault(name, default)

    @torch.no_grad()
    def update_slow(self, group):
        for fast_p in group["params"]:
            if fast_p.grad is None:
                continue
            param_state = self._base_optimizer.state[fast_p]
            if "lookahead_slow_buff" not in param_state:  # made once, at the first slow update
                param_state["lookahead_slow_buff"] = torch.empty_like(fast_p)
                param_state["lookahead_slow_buff"].copy_(fast_p)
            slow = param_state["lookahead_slow_buff"]
            slow.add_(fast_p - slow, alpha=group["lookahead_alpha"])
            fast_p.copy_(slow)

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._base_optimizer.step(closure)
        for group in self._base_optimizer.param_groups:
            group["lookahead_step"] += 1
            if group["lookahead_step"] % group["lookahead_k"] == 0:
                self.update_slow(group)
        return loss

    def zero_grad(self, set_to_none=True):
        self._base_optimizer.zero_grad(set_to_none)


def run(tracker_factory, steps=30):
    g = seed(71)
    model = MLP(hidden=256)
    opt = Lookahead(torch.optim.AdamW(model.parameters(), lr=1e-3), alpha=0.5, k=6)
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            x, y = batch(g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
