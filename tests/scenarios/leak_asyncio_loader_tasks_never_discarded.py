"""An asyncio batch loader keeps every task it starts in a set so that the event loop's weak
references do not let a pending task vanish, as the ``asyncio.create_task`` documentation asks, but
it leaves out the second half of that recipe (``task.add_done_callback(tasks.discard)``). A finished
``Task`` keeps its result: every batch the loader ever produced stays reachable from
``_background_tasks`` after the step that used it.

Real case: the ``create_task`` recipe added to the docs in python/cpython
https://github.com/python/cpython/pull/93258 ("To prevent keeping references to finished tasks
forever, make each task remove its own reference from the set after completion") and its
half-adoption in ETS-Next-Gen/writing_observer https://github.com/ETS-Next-Gen/writing_observer/pull/192
(review: "When tasks finish, ideally, they'd be removed from the set() so it doesn't keep growing
forever") and letta-ai/letta https://github.com/letta-ai/letta/pull/2823.
"""
import asyncio

import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "_background_tasks", "top": 1}

_background_tasks = set()


async def load_batch(g, n=256):
    await asyncio.sleep(0)  # stands in for reading and decoding a shard
    x = torch.randn(n, DIM, generator=g)
    return x, torch.randint(0, 4, (n,), generator=g)


def start(loop, coro):
    task = loop.create_task(coro)
    _background_tasks.add(task)  # the leak: never discarded once done
    return task


def run(tracker_factory, steps=30):
    g = seed(3104)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loop = asyncio.new_event_loop()
    _background_tasks.clear()
    try:
        nxt = start(loop, load_batch(g))
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = loop.run_until_complete(nxt)
                nxt = start(loop, load_batch(g))  # prefetch the next batch
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
        loop.run_until_complete(nxt)
    finally:
        _background_tasks.clear()
        loop.close()
