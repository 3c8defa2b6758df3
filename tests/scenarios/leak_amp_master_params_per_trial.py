"""Hyper-parameter search with apex-style O2 mixed precision: each trial builds a new model,
casts it to half precision and calls ``amp_initialize(model, optimizer)``, which makes fp32 master
copies of the weights for the optimizer to update and records the model, the optimizer and the
master weights in the module-level ``_amp_state`` (the global AMP handle). Nothing in the API
removes a trial from ``_amp_state``, so every finished trial's fp32 master weights, its Adam
moments and its bf16 model stay alive. Growth comes in steps, one trial every 4 training steps.

Real case: NVIDIA/apex https://github.com/NVIDIA/apex/issues/439 ("GPU memory issues (leak?)":
re-creating the model and optimizer and calling ``amp.initialize`` again for each hyper-parameter
trial keeps memory growing; "most things go through the AmpHandle, _amp_state, and master_params.
Is there a way to clear those out?").
"""
import torch
from torch import nn

from ._common import DIM, batch, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_amp_state", "top": 1}
TRIAL_STEPS = 4


class _AmpState:
    def __init__(self):
        self.models = []
        self.optimizers = []
        self.master_params = []


_amp_state = _AmpState()  # process-wide, as apex.amp._amp_state


def amp_initialize(model, lr):
    model = model.to(torch.bfloat16)
    master = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
    opt = torch.optim.Adam(master, lr=lr)
    _amp_state.models.append(model)
    _amp_state.optimizers.append(opt)
    _amp_state.master_params.append(master)
    return model, opt, master


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def run(tracker_factory, steps=30):
    g = seed(5102)
    _amp_state.__init__()
    lrs = [1e-3, 3e-4, 1e-4, 3e-3]
    model, opt, master = amp_initialize(make_model(), lrs[0])
    try:
        with tracker_factory(model, optimizer=opt) as tracker:
            for step in range(steps):
                if step and step % TRIAL_STEPS == 0:  # next trial
                    model, opt, master = amp_initialize(make_model(), lrs[(step // TRIAL_STEPS) % 4])
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(model(x.to(torch.bfloat16)).float(), y)
                model.zero_grad(set_to_none=True)
                loss.backward()
                for m, p in zip(master, model.parameters()):
                    m.grad = p.grad.float()
                opt.step()
                opt.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for m, p in zip(master, model.parameters()):
                        p.copy_(m)
                tracker.step()
    finally:
        _amp_state.__init__()
