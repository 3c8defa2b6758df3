"""Per-step statistics are all-reduced asynchronously (``async_op=True``) and each handle is kept
in a list to be waited on "later", which never comes: every Work keeps the tensor it reduced, in
C++, where no Python reference to the tensor shows. The list of handles is the holder.

Real case: sglang https://github.com/sgl-project/sglang/pull/28916 ("enqueues an isend + cloned
tensor into work_list every event round ... work_list grows unbounded and leaks ~12GB/h"), and the
c10d discussion https://github.com/pytorch/pytorch/issues/147168 (the tensors are stashed on the
work object returned to the user, so keeping the Work keeps them). One process, gloo, a group of one.
"""
import torch
import torch.distributed as dist
from torch import nn

from ._common import MLP, batch, gloo_group_of_one, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "pending", "top": 1}


def run(tracker_factory, steps=30):
    g = seed(73)
    model = MLP(hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pending = []
    with gloo_group_of_one():
        try:
            with tracker_factory(model, optimizer=opt) as tracker:
                for step in range(steps):
                    x, y = batch(g, n=256)
                    out = model(x)
                    loss = nn.functional.cross_entropy(out, y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    stats = out.detach().clone()  # this step's logits, for a cross-rank histogram
                    pending.append(dist.all_reduce(stats, async_op=True))  # the leak: never waited, never dropped
                    tracker.step()
        finally:
            for work in pending:
                work.wait()
