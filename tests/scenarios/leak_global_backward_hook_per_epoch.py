"""A gradient-flow logger that installs a *global* full backward hook
(``torch.nn.modules.module.register_module_full_backward_hook``) at the start of every epoch, so
it "always watches the current model", and never removes the previous one. Each logger keeps the
``grad_output`` of every Linear layer it sees, to plot the epoch's gradient flow; the plot is
drawn from the newest logger, but every older logger is still registered in torch's global hook
dict and keeps collecting as well: epoch after epoch, more hooks fire on every backward and each
keeps every gradient it sees.

Real case: deepspeedai/DeepSpeed https://github.com/deepspeedai/DeepSpeed/issues/1572 ("a huge
memory leak when using ``register_full_backward_hook``"), pytorch/pytorch
https://github.com/pytorch/pytorch/issues/74831 (full backward hooks keeping ``grad_outputs``
alive) and the global hooks added for "profiling or visualization tools" in
https://github.com/pytorch/pytorch/pull/38972.
"""
import torch
from torch import nn

from ._common import MLP, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "grad_flow", "top": 1}


def install_grad_flow_logger():
    grad_flow = []

    def hook(module, grad_input, grad_output):
        if isinstance(module, nn.Linear) and grad_output[0] is not None:
            grad_flow.append(grad_output[0].detach())

    handle = torch.nn.modules.module.register_module_full_backward_hook(hook)
    return grad_flow, handle


def run(tracker_factory, steps=30, steps_per_epoch=3):
    g = seed(5809)
    model = MLP(hidden=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handles = []
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                if step % steps_per_epoch == 0:
                    grad_flow, handle = install_grad_flow_logger()  # the leak: the old one stays
                    handles.append(handle)  # (kept only so the scenario can clean up afterwards)
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step % steps_per_epoch == steps_per_epoch - 1:
                    mean_norms = [t.norm().item() for t in grad_flow[-3:]]  # the epoch's plot
                tracker.step()
    finally:
        for h in handles:
            h.remove()
