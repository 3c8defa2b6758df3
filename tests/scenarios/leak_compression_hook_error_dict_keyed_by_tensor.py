"""Cross-validation under ``DistributedDataParallel`` (gloo, a group of one) with compressed
gradients and error feedback, written after the first version of PowerSGD's hook: the fp16
compression error of each bucket is kept in ``state.error_dict`` and added back next step, keyed by
the bucket's input tensor. The state object is made once, before the fold loop, and registered
with each fold's new ``DDP``. Within a fold the key hits (the bucket keeps its tensor), but each
fold's wrapper has new buckets, so the lookup never hits an old key again and nothing removes
one: every finished fold leaves its error tensors, and through the keys its bucket storage, in the
dict. Growth comes in steps, about two gradient-sized tensors per fold (every 5 steps).

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/pull/48670 ("the current key,
input tensor of the bucket, can change across steps, as the buckets may be rebuilt") and its fix
https://github.com/pytorch/pytorch/pull/48867 ("Previously the key of error_dict is the hashcode
of tensor. Now replaced with bucket index ... Error dict in the state never removes any key. If the
bucket rebuild process occurs frequently, the size of error dict can increase").
"""
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ._common import DIM, batch, gloo_group_of_one, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "error_dict", "top": 1}
FOLD_STEPS = 5


class CompressionState:
    def __init__(self, process_group=None):
        self.process_group = process_group
        self.error_dict = {}


def fp16_error_feedback_hook(state, bucket):
    grad = bucket.buffer()
    key = grad  # the leak: the bucket tensor, hashed by identity; a new fold has new buckets
    if key in state.error_dict:
        grad.add_(state.error_dict[key])
    compressed = grad.to(torch.float16)
    state.error_dict[key] = grad - compressed.float()
    fut = torch.futures.Future()
    fut.set_result(compressed.float())  # one rank: the all-reduce is the identity
    return fut


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def wrap(model, state):
    ddp = DDP(model)
    ddp.register_comm_hook(state, fp16_error_feedback_hook)
    return ddp


def run(tracker_factory, steps=30):
    g = seed(5717)
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
