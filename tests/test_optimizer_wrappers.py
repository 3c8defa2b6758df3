"""An optimizer wrapper that subclasses ``torch.optim.Optimizer`` without running its ``__init__``
(timm's ``Lookahead``: no step hooks of its own) is tracked through the optimizer it wraps, and one
that wraps nothing hookable is left unhooked rather than failing the run."""
from collections import defaultdict

import pytest
import torch

import memleak

from tests.helpers import model_and_optimizer


def _step(model, opt):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


class Wrapper(torch.optim.Optimizer):
    """timm's Lookahead shape: subclasses Optimizer, never calls its __init__, shares the base
    optimizer's param_groups and keeps a slow copy in the base's state from step k on."""

    def __init__(self, base, k=5):
        self._base_optimizer = base
        self.param_groups = base.param_groups
        self.defaults = base.defaults
        self.state = defaultdict(dict)
        self.k, self.n = k, 0

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._base_optimizer.step(closure)
        self.n += 1
        if self.n % self.k == 0:
            for g in self.param_groups:
                for p in g["params"]:
                    st = self._base_optimizer.state[p]
                    if "slow" not in st:
                        st["slow"] = p.detach().clone()
                    st["slow"].add_(p - st["slow"], alpha=0.5)
                    p.copy_(st["slow"])
        return loss

    def zero_grad(self, set_to_none=True):
        self._base_optimizer.zero_grad(set_to_none)


def test_a_wrapper_optimizer_is_tracked_through_the_one_it_wraps():
    from memleak.recorder.options import wrapped_optimizer

    model, base = model_and_optimizer()
    opt = Wrapper(base)
    assert wrapped_optimizer(opt) is base
    assert wrapped_optimizer(base) is base
    with memleak.track(model, optimizer=opt) as tracker:
        for _ in range(30):
            _step(model, opt)
            tracker.step()
    assert tracker.report().verdict == "clean", str(tracker.report())


@pytest.mark.parametrize("with_step_call", [False, True])
def test_a_wrapper_of_nothing_hookable_is_left_unhooked(with_step_call):
    from memleak.recorder.options import wrapped_optimizer

    model, _ = model_and_optimizer()
    lone = Wrapper.__new__(Wrapper)  # no base optimizer at all: nothing to hook
    lone.param_groups = [{"params": list(model.parameters())}]
    lone.state = defaultdict(dict)
    assert wrapped_optimizer(lone) is lone
    with memleak.track(model, optimizer=lone) as tracker:
        for _ in range(10):
            model(torch.randn(4, 64)).sum().backward()
            if with_step_call:
                tracker.step()
    tracker.report()
