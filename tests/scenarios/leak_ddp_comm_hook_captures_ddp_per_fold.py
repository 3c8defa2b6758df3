"""Cross-validation under ``DistributedDataParallel`` (gloo, a group of one): each fold wraps a
fresh model in a new ``DDP`` and registers a communication hook that, like ZeRO's
``hook_with_zero_step``, needs the wrapper itself, so the hook closes over ``ddp``. DDP hands the
hook to its C++ ``Reducer``, which holds it; the hook holds ``ddp``, and ``ddp`` holds the reducer.
The cycle runs through C++, where Python's garbage collector cannot see it, so rebinding ``ddp`` for
the next fold (and ``gc.collect()``) frees nothing: every finished fold keeps its model, its
gradients and its reducer buckets. Growth comes in steps, one model per fold (every 5 steps).

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/63211 ("Memory leak in
``ddp_zero_hook.py`` hooks": "referencing the ``ddp: DistributedDataParallel`` variable in
``hook_with_zero_step()`` ... the reference count for model parameters ... remain positive";
"``torch.cuda.max_memory_allocated()`` was steadily increasing when running models back-to-back";
the temporary fix is a weak reference to ``ddp``).
"""
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ._common import DIM, batch, gloo_group_of_one, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "hook_with_fold_step", "top": 1}
FOLD_STEPS = 5


def make_model():
    return nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def wrap(model):
    ddp = DDP(model)

    def hook_with_fold_step(state, bucket):
        # needs the wrapper (to read its bucket assignment, as ZeRO's hook does): captures ``ddp``
        assert ddp.process_group is not None
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())  # one rank: the all-reduce is the identity
        return fut

    ddp.register_comm_hook(None, hook_with_fold_step)
    return ddp


def run(tracker_factory, steps=60):  # a fold every 5 steps: a dozen folds
    g = seed(5711)
    with gloo_group_of_one():
        ddp = wrap(make_model())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        with tracker_factory(ddp, optimizer=opt) as tracker:
            for step in range(steps):
                if step and step % FOLD_STEPS == 0:  # next fold: fresh model, fresh wrapper
                    ddp = wrap(make_model())
                    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
                x, y = batch(g, n=64)
                loss = nn.functional.cross_entropy(ddp(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
