"""Cross-validation under ``DistributedDataParallel`` (gloo, a group of one): each fold wraps a
fresh model in a new ``DDP`` and registers a communication hook that needs the wrapper. The hook
reaches the wrapper through a ``weakref`` (the fix adopted for ZeRO's DDP hooks), so no cycle runs
through DDP's C++ reducer: rebinding ``ddp`` for the next fold frees the previous model, its
gradients and its buckets. Each fold allocates a new model and new buckets, which looks like
growth every 5 steps, but only one fold is ever alive.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/63211 ("The temporary
solution is to convert ``ddp`` variable to a weak reference ``ddp_ref``").
"""
import weakref

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ._common import DIM, batch, gloo_group_of_one, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}
FOLD_STEPS = 5


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def wrap(model):
    ddp = DDP(model)
    ddp_ref = weakref.ref(ddp)

    def hook_with_fold_step(state, bucket):
        assert ddp_ref().process_group is not None
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(None, hook_with_fold_step)
    return ddp


def run(tracker_factory, steps=60):  # a fold every 5 steps: a dozen folds
    g = seed(5712)
    with gloo_group_of_one():
        ddp = wrap(make_model())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        with tracker_factory(ddp, optimizer=opt) as tracker:
            for step in range(steps):
                if step and step % FOLD_STEPS == 0:
                    ddp = wrap(make_model())
                    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(ddp(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
