"""Cross-validation under ``DistributedDataParallel`` (gloo, a group of one) with compressed
gradients and error feedback: the fp16 compression error of each bucket is kept in
``state.error_dict`` and added back next step, keyed by ``bucket.index()`` (PowerSGD's fix). The
state is made once and registered with each fold's new ``DDP``; a new fold's first step finds an
entry for its bucket index and replaces it (the shape check skips a stale one), so the dict holds
one error tensor per bucket. A gradient-sized tensor is made every step and kept past it, and each
fold builds a new model and buckets, which looks like growth, but nothing of an old fold stays.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/pull/48867 ("Replace the key of
error_dict in PowerSGD state with bucket index"), fixing the per-tensor key of
https://github.com/pytorch/pytorch/pull/48670.
"""
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ._common import DIM, batch, gloo_group_of_one, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
FOLD_STEPS = 5


class CompressionState:
    def __init__(self, process_group=None):
        self.process_group = process_group
        self.error_dict = {}


def fp16_error_feedback_hook(state, bucket):
    grad = bucket.buffer()
    key = bucket.index()
    err = state.error_dict.get(key)
    if err is not None and err.shape == grad.shape:
        grad.add_(err)
    compressed = grad.to(torch.float16)
    state.error_dict[key] = grad - compressed.float()
    fut = torch.futures.Future()
    fut.set_result(compressed.float())
    return fut


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def wrap(model, state):
    ddp = DDP(model)
    ddp.register_comm_hook(state, fp16_error_feedback_hook)
    return ddp


def run(tracker_factory, steps=30):
    g = seed(5718)
    with gloo_group_of_one():
        state = CompressionState()  # made once, before the fold loop
        ddp = wrap(make_model(), state)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        with tracker_factory(ddp, optimizer=opt) as tracker:
            for step in range(steps):
                if step and step % FOLD_STEPS == 0:  # next fold: fresh model and wrapper, same state
                    ddp = wrap(make_model(), state)
                    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(ddp(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
