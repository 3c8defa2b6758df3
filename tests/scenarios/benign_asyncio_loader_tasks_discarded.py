"""An asyncio batch loader keeps the tasks it starts in a set, with the full recipe of the
``asyncio.create_task`` documentation: each task removes itself from the set when it is done
(``task.add_done_callback(_background_tasks.discard)``). At most the prefetched task and the one
being consumed are in the set, so the batches are given back one step later: bounded, not a leak,
though the code looks like the leaking variant.

Real case: the recipe from python/cpython https://github.com/python/cpython/pull/93258 ("make each
task remove its own reference from the set after completion"), as adopted in letta-ai/letta
https://github.com/letta-ai/letta/pull/2823 (``task.add_done_callback(_background_tasks.discard)``,
"Remove task from set when done to prevent memory leaks").
"""
import asyncio

import torch
from torch import nn

from ._common import DIM, MLP, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

_background_tasks = set()


async def load_batch(g, n=256):
    await asyncio.sleep(0)
    x = torch.randn(n, DIM, generator=g)
    return x, torch.randint(0, 4, (n,), generator=g)


def start(loop, coro):
    task = loop.create_task(coro)
    _background_tasks.add(task)
    task.add_done_callback(_background_tasks.discard)
    return task


def run(tracker_factory, steps=30):
    g = seed(3105)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loop = asyncio.new_event_loop()
    _background_tasks.clear()
    try:
        nxt = start(loop, load_batch(g))
        with tracker_factory(model, optimizer=opt) as tracker:
            for _ in range(steps):
                x, y = loop.run_until_complete(nxt)
                nxt = start(loop, load_batch(g))
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tracker.step()
        loop.run_until_complete(nxt)
    finally:
        _background_tasks.clear()
        loop.close()
