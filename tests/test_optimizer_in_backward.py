"""An optimizer stepped from a gradient hook (optimizer in backward) ends memleak's iterations
inside backward: a deep step that begins there pushes its mode and saved-tensor hooks into the
thread state the autograd engine puts back when backward returns, which drops them. Closing still
leaves nothing of memleak's behind: no hook, no wrapper, nothing waiting to be swept."""
import warnings

import torch
from torch import nn

import memleak
from memleak.probes import tagging, warn_sites

DISABLE = torch.autograd.graph.disable_saved_tensors_hooks
SHOW = warnings._showwarnmsg


def test_a_step_that_ends_inside_backward_leaves_nothing_behind():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opts = {p: torch.optim.SGD([p], lr=0.01) for p in model.parameters()}

    def hook(p):
        opts[p].step()
        opts[p].zero_grad(set_to_none=True)

    handles = [p.register_post_accumulate_grad_hook(hook) for p in model.parameters()]
    try:
        with memleak.track(model, optimizer=next(iter(opts.values())), level="full") as tracker:
            for _ in range(8):
                model(torch.randn(16, 32)).pow(2).mean().backward()
                tracker.step()
    finally:
        for h in handles:
            h.remove()
    assert tracker.iterations >= 8
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert torch._C._len_torch_function_stack() == 0
    assert torch.autograd.graph.disable_saved_tensors_hooks is DISABLE and tagging._wrapped == 0
    assert warnings._showwarnmsg is SHOW and warn_sites._installed == 0
    assert not any(tagging._inert.values())
