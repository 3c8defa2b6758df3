"""Per-step statistics are all-reduced asynchronously (``async_op=True``), overlapped with the next
step's compute, and the handles are waited on and dropped at the start of the next step: at most
one step's Work and its tensor are alive at a time.

Real case: the fix of https://github.com/sgl-project/sglang/pull/28916 (the previous round's sends
are waited on and the work list cleared before new ones go in, bounding it to one round), and the
``work.wait()`` pattern of https://github.com/pytorch/pytorch/issues/147168. One process, gloo, a
group of one.
"""
import torch
import torch.distributed as dist
from torch import nn

from ._common import MLP, batch, gloo_group_of_one, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


def run(tracker_factory, steps=30):
    g = seed(74)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pending = []
    with gloo_group_of_one():
        try:
            with tracker_factory(model, optimizer=opt) as tracker:
                for step in range(steps):
                    for work in pending:  # last step's reductions: done by now
                        work.wait()
                    pending.clear()
                    x, y = batch(g, n=256)
                    out = model(x)
                    loss = nn.functional.cross_entropy(out, y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    pending.append(dist.all_reduce(out.detach().clone(), async_op=True))
                    tracker.step()
        finally:
            for work in pending:
                work.wait()
